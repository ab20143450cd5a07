"""The whole web app (UI, /api/ocr, /healthz, /metrics) served by uvicorn on a free loopback port.

    with LiveApp(settings) as live:
        httpx.get(live.url + "/healthz")

It runs ``app.create_app(settings)`` (the real entry point's factory) on its own event loop in a thread,
and stops it by telling that server to exit, never by killing anything by name.
"""

from __future__ import annotations

import asyncio
import threading
import time

import uvicorn

from app import create_app
from ocr_ui.config import Settings


class LiveApp:
    """A running app for tests; ``url`` is its root (no trailing slash)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning",
                                                    lifespan="on", timeout_graceful_shutdown=1))
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveApp:
        self._thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), name="live-app", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the app did not start")
            time.sleep(0.05)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)

    def __enter__(self) -> LiveApp:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
