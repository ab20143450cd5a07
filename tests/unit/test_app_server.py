"""The server under the app: uvicorn's "auto" choices resolve to uvloop and httptools (requirements.txt)."""

from __future__ import annotations

from typing import Any

import uvicorn


async def _app(scope: Any, receive: Any, send: Any) -> None:  # never called: only the config is loaded
    raise AssertionError("not served")


def test_uvicorn_serves_the_app_on_uvloop_and_httptools() -> None:
    # Without them uvicorn falls back to asyncio and the pure-Python h11 without a word; with both, the
    # app's median time to first token at 16 paced clients dropped ~20 ms on the dev box (README).
    config = uvicorn.Config(_app, loop="auto", http="auto")
    config.load()
    assert config.http_protocol_class.__name__ == "HttpToolsProtocol"
    factory = config.get_loop_factory()
    assert factory is not None
    loop = factory()
    try:
        assert type(loop).__module__.split(".")[0] == "uvloop"
    finally:
        loop.close()
