"""A crashed engine: the client says so clearly, and the same client works once the engine is back."""

from __future__ import annotations

import asyncio
import contextlib
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


async def _consume(stream: AsyncIterator[Chunk], first: asyncio.Event) -> None:
    async with aclosing(stream) as chunks:  # type: ignore[type-var]
        async for _chunk in chunks:
            first.set()


def _engine_core_pid(api_server_pid: int) -> int:
    children = psutil.Process(api_server_pid).children(recursive=True)
    cores = [c.pid for c in children if "EngineCore" in c.name() or "EngineCore" in " ".join(c.cmdline())]
    return cores[0] if cores else api_server_pid  # without multiprocessing the core lives in the API server


# The tiny model can decode a whole 16,000-token answer faster than the kill lands (seen in full runs on
# this 2-core machine); the engine is always restored, so a rerun starts clean.
@pytest.mark.flaky(reruns=2)
async def test_killed_engine_breaks_the_stream_and_the_client_recovers_after_restart(vllm_server: Server) -> None:
    client = EngineClient(vllm_server.settings)
    killed = False
    try:
        stream = client.stream(messages(page_image("CRASH")), max_tokens=16000, sampling=GREEDY,
                               extra_body=GREEDY_EXTRA, request_id="e2e-crash")
        first = asyncio.Event()
        reading = asyncio.create_task(_consume(stream, first))
        # Kill at the first streamed text, or after 0.2 s if a random model's first tokens decode to
        # nothing: the tiny model can finish 16,000 tokens in well under a second on this CPU.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.2):
                await first.wait()
        assert not reading.done(), "the answer ended before the engine could be killed"
        # The engine core dies as if the OOM killer took it. Killing the core, not the API server, makes
        # the break independent of socket buffering: an answer already in flight would still arrive whole
        # after an API-server kill; a dead core always ends the stream (or the request) with an error.
        killed = True
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
        killed = False
        again = await client.complete(messages(page_image("BACK")), max_tokens=8, sampling=GREEDY,
                                      extra_body=GREEDY_EXTRA, request_id="e2e-back")
        assert again.finish_reason == "length" and again.output_tokens == 8
    finally:
        await client.close()
        # Never leave the session's engine dead (or with a dead core) for the tests after this one.
        if killed or not vllm_server.process.alive():
            await asyncio.to_thread(vllm_server.restart)
