"""Prometheus metrics, one registry per app so several apps (tests) never collide."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.deliveries = Counter(
            "nkibot_deliveries", "Webhook deliveries by event and outcome",
            ["event", "outcome"], registry=self.registry)
        self.inbox_depth = Gauge(
            "nkibot_inbox_depth", "Inbox items waiting or leased", registry=self.registry)
        self.dispatch_seconds = Histogram(
            "nkibot_dispatch_seconds", "Time from lease to ack of one inbox item",
            registry=self.registry)
        self.jobs_enqueued = Counter(
            "nkibot_jobs_enqueued", "Jobs put on the jobs queue", registry=self.registry)
        self.payloads_dropped = Counter(
            "nkibot_payloads_dropped", "Deliveries dropped because a needed field is absent",
            ["event", "field"], registry=self.registry)
        self.decisions = Counter(
            "nkibot_decisions", "Dispatcher decisions by kind", ["kind"],
            registry=self.registry)

    def watch_depth(self, depth: Callable[[], int]) -> None:
        """Read the inbox depth at scrape time; -1 when the queue cannot be reached."""

        def read() -> float:
            try:
                return float(depth())
            except Exception:
                return -1.0

        self.inbox_depth.set_function(read)
