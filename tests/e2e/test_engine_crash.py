"""A crashed engine: the client says so clearly, and the same client works once the engine is back."""

from __future__ import annotations

import asyncio
import os
import signal
from contextlib import aclosing

import pytest

from ocr_ui.client import EngineClient
from ocr_ui.errors import EngineUnavailable, StreamBroken
from tests.e2e.conftest import Server
from tests.e2e.media import GREEDY, GREEDY_EXTRA, messages, page_image

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


async def test_killed_engine_breaks_the_stream_and_the_client_recovers_after_restart(vllm_server: Server) -> None:
    client = EngineClient(vllm_server.settings)
    try:
        stream = client.stream(messages(page_image("CRASH")), max_tokens=16000, sampling=GREEDY,
                               extra_body=GREEDY_EXTRA, request_id="e2e-crash")
        with pytest.raises((StreamBroken, EngineUnavailable)) as broken:
            async with aclosing(stream) as chunks:
                async for _chunk in chunks:
                    # Kill as soon as the stream has begun (any chunk: a random model's first tokens
                    # may decode to no visible text, and waiting for text could let the answer finish).
                    if vllm_server.process.alive():
                        # The API server dies as if the OOM killer took it; its engine core is orphaned
                        # and is cleaned up by the supervisor's process-group stop on restart.
                        os.kill(vllm_server.process.pid, signal.SIGKILL)  # type: ignore[arg-type]
        assert "engine" in str(broken.value).lower()

        state = await client.health()
        assert (state.up, state.status) == (False, "down")
        with pytest.raises(EngineUnavailable):
            await client.complete(messages(page_image("DOWN")), max_tokens=8, sampling=GREEDY,
                                  extra_body=GREEDY_EXTRA, request_id="e2e-down")

        await asyncio.to_thread(vllm_server.restart)
        again = await client.complete(messages(page_image("BACK")), max_tokens=8, sampling=GREEDY,
                                      extra_body=GREEDY_EXTRA, request_id="e2e-back")
        assert again.text and again.finish_reason == "length"
    finally:
        await client.close()
        if not vllm_server.process.alive():  # never leave the session's engine dead for the tests after this one
            await asyncio.to_thread(vllm_server.restart)
