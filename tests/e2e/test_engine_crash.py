"""A crashed engine: the client says so clearly, and the same client works once the engine is back."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest

from ocr_ui.client import Chunk, EngineClient
from ocr_ui.errors import EngineUnavailable, StreamBroken
from tests.e2e.conftest import Server
from tests.e2e.engine_metrics import GENERATED, sample
from tests.e2e.media import GREEDY, GREEDY_EXTRA, messages, page_image

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


async def _consume(stream: AsyncIterator[Chunk]) -> None:
    async with aclosing(stream) as chunks:  # type: ignore[type-var]
        async for _chunk in chunks:
            pass


async def _wait_for_generation(root_url: str, before: float) -> None:
    # vLLM's own counter, not visible text: a random model's first tokens may decode to nothing at all.
    async with asyncio.timeout(60):
        while await asyncio.to_thread(sample, root_url, GENERATED) <= before:  # noqa: ASYNC110 (an external counter)
            await asyncio.sleep(0.1)


async def test_killed_engine_breaks_the_stream_and_the_client_recovers_after_restart(vllm_server: Server) -> None:
    client = EngineClient(vllm_server.settings)
    try:
        before = await asyncio.to_thread(sample, vllm_server.root_url, GENERATED)
        stream = client.stream(messages(page_image("CRASH")), max_tokens=16000, sampling=GREEDY,
                               extra_body=GREEDY_EXTRA, request_id="e2e-crash")
        reading = asyncio.create_task(_consume(stream))
        await _wait_for_generation(vllm_server.root_url, before)
        assert not reading.done(), "16,000 tokens cannot be finished before the kill"
        # The API server dies as if the OOM killer took it; its engine core is orphaned and is cleaned
        # up by the supervisor's process-group stop on restart.
        os.kill(vllm_server.process.pid, signal.SIGKILL)  # type: ignore[arg-type]
        with pytest.raises((StreamBroken, EngineUnavailable)) as broken:
            await reading
        assert "engine" in str(broken.value).lower()

        state = await client.health()
        assert (state.up, state.status) == (False, "down")
        with pytest.raises(EngineUnavailable):
            await client.complete(messages(page_image("DOWN")), max_tokens=8, sampling=GREEDY,
                                  extra_body=GREEDY_EXTRA, request_id="e2e-down")

        await asyncio.to_thread(vllm_server.restart)
        again = await client.complete(messages(page_image("BACK")), max_tokens=8, sampling=GREEDY,
                                      extra_body=GREEDY_EXTRA, request_id="e2e-back")
        assert again.finish_reason == "length" and again.output_tokens == 8
    finally:
        await client.close()
        if not vllm_server.process.alive():  # never leave the session's engine dead for the tests after this one
            await asyncio.to_thread(vllm_server.restart)
