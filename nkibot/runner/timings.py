"""Seconds per stage of one job, for the logs and the throughput benchmark."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Timings:
    """Seconds per stage, for logs and the throughput benchmark."""

    stages: dict[str, float] = field(default_factory=dict)

    _current: tuple[str, float] | None = None

    def add(self, stage: str, seconds: float) -> None:
        self.stages[stage] = self.stages.get(stage, 0.0) + seconds

    def on_stage(self, stage: str) -> None:
        """The pipeline's stage callback: time spent in each of its stages."""
        self.end_stage()
        self._current = (stage, time.monotonic())

    def end_stage(self) -> None:
        if self._current is not None:
            name, since = self._current
            self.add(name, time.monotonic() - since)
            self._current = None
