"""A crashed engine: the client says so clearly, and the same client works once the engine is back."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import aclosing

import psutil
import pytest

from ocr_ui.client import Chunk, EngineClient
from ocr_ui.errors import BackendError
from tests.e2e.conftest import Server
from tests.e2e.media import GREEDY, GREEDY_EXTRA, messages, page_image

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


async def _consume(stream: AsyncIterator[Chunk]) -> None:
    async with aclosing(stream) as chunks:  # type: ignore[type-var]
        async for _chunk in chunks:
            pass


def _engine_core_pid(api_server_pid: int) -> int:
    children = psutil.Process(api_server_pid).children(recursive=True)
    cores = [c.pid for c in children if "EngineCore" in c.name() or "EngineCore" in " ".join(c.cmdline())]
    return cores[0] if cores else api_server_pid  # without multiprocessing the core lives in the API server


async def test_killed_engine_breaks_the_stream_and_the_client_recovers_after_restart(vllm_server: Server) -> None:
    client = EngineClient(vllm_server.settings)
    try:
        stream = client.stream(messages(page_image("CRASH")), max_tokens=16000, sampling=GREEDY,
                               extra_body=GREEDY_EXTRA, request_id="e2e-crash")
        reading = asyncio.create_task(_consume(stream))
        await asyncio.sleep(0.5)  # the request is in the engine; 16,000 tokens take far longer than this
        assert not reading.done(), "the answer ended before the engine could be killed"
        # The engine core dies as if the OOM killer took it. Killing the core, not the API server, makes
        # the break independent of speed: vLLM's token counter is not a timely signal on the CPU build,
        # visible text may come late from a random model, and an answer already in socket buffers would
        # still arrive whole after an API-server kill; a dead core always ends the stream with an error.
        os.kill(_engine_core_pid(vllm_server.process.pid), signal.SIGKILL)  # type: ignore[arg-type]
        with pytest.raises(BackendError) as broken:
            await reading
        assert "engine" in str(broken.value).lower()

        state = await client.health()
        assert (state.up, state.status) == (False, "down")
        with pytest.raises(BackendError):
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
