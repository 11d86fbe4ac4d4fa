"""Serve an ASGI app on 127.0.0.1:<ephemeral port> in a daemon thread (the doubles' transport)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


class ServerThread:
    """`with ServerThread(app) as url:` serves `app` over real HTTP until the block ends."""

    def __init__(self, app: Any) -> None:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                lifespan="off", ws="none", interface="asgi3")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the server for {type(self.server.config.app).__name__} "
                                   "did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
