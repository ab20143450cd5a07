"""Two real vLLM engines (CPU build, tiny checkpoint) behind Debian's nginx, reached by the app's client.

The session's engine is one of the two; this module starts a second one on another port (while the
first is still loading, when it has not started yet), renders the router config with
``ocr_ui.router_config`` and runs nginx as a child process. The second engine is the one stopped, so
the session's engine stays up for the other e2e tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ocr_ui import engine
from ocr_ui.client import Chunk, EngineClient
from ocr_ui.router_config import upstream_address
from tests.e2e.conftest import STARTUP_TIMEOUT_S, Server, e2e_settings, free_port
from tests.e2e.engine_metrics import sample
from tests.e2e.media import GREEDY, GREEDY_EXTRA, messages, page_image
from tests.support.router import Router, require_nginx, running_router, wait_for_log

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.anyio]

N = 8
MAX_TOKENS = 8
DONE = "vllm:request_success_total"


@pytest.fixture(scope="module")
def two_engines(request: pytest.FixtureRequest, engine_python: Path, tiny_checkpoint: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """(the session's engine, a second engine of this module's own); the second is stopped at the end."""
    require_nginx()
    work = tmp_path_factory.mktemp("second-engine")
    second = Server(engine_python, e2e_settings(tiny_checkpoint, free_port()), work / "engine.log", work / "scratch")
    argv = engine.server_command(second.python, second.settings, "cpu")
    env = engine.server_env(second.settings, "cpu", dict(os.environ), second.scratch)
    second.process = engine.EngineProcess(argv, env, second.log_path, name="second engine").start()
    try:
        first: Server = request.getfixturevalue("vllm_server")  # loads alongside the second on a cold session
        waited = second.process.wait_healthy(STARTUP_TIMEOUT_S)
        sys.stderr.write(f"\n[e2e] second vLLM ready {waited:.1f} s after the first (pid {second.process.pid})\n")
        yield first, second
    except Exception:
        sys.stderr.write(f"--- second engine log tail ---\n{second.process.log_tail(60)}\n")
        raise
    finally:
        second.process.stop()


@pytest.fixture
def router(tmp_path: Path, two_engines: tuple[Server, Server]) -> Iterator[Router]:
    first, second = two_engines
    with running_router(tmp_path / "nginx", first.settings, [first.base_url, second.base_url]) as running:
        yield running


@pytest.fixture
async def client(router: Router, two_engines: tuple[Server, Server], tiny_checkpoint: Path) -> AsyncIterator[EngineClient]:
    first, _ = two_engines
    # The in-flight limit is the sum over the engines (4 running sequences each); no client retries,
    # so every failover seen below is nginx's doing.
    settings = e2e_settings(tiny_checkpoint, first.settings.engine.port, engine__base_url=router.base_url,
                            client__max_in_flight=str(2 * first.settings.engine.max_num_seqs))
    engine_client = EngineClient(settings)
    yield engine_client
    await engine_client.close()


async def read_page(client: EngineClient, number: int) -> list[Chunk]:
    stream = client.stream(messages(page_image("INVOICE 7")), max_tokens=MAX_TOKENS, sampling=GREEDY,
                           extra_body=GREEDY_EXTRA, request_id=f"page-{number}")
    async with contextlib.aclosing(stream) as chunks:
        return [chunk async for chunk in chunks]


def served(engines: tuple[Server, ...]) -> list[float]:
    return [sample(server.root_url, DONE) for server in engines]


async def test_requests_through_nginx_reach_both_engines_and_survive_one_stopping(
        two_engines: tuple[Server, Server], router: Router, client: EngineClient) -> None:
    first, second = two_engines
    before = served(two_engines)
    answers = await asyncio.gather(*(read_page(client, i) for i in range(N)))
    texts = {"".join(c.text for c in chunks) for chunks in answers}
    assert len(texts) == 1 and "" not in texts  # same page, same greedy answer, whichever engine served it
    assert [chunks[-1].finish_reason for chunks in answers] == ["length"] * N
    assert [chunks[-1].output_tokens for chunks in answers] == [MAX_TOKENS] * N
    spread = [after - was for after, was in zip(served(two_engines), before, strict=True)]
    sys.stderr.write(f"\n[e2e] {N} requests through nginx: {spread[0]:g} to the first engine, {spread[1]:g} to the second\n")
    assert spread[0] >= 1 and spread[1] >= 1, spread
    assert sum(spread) == N
    wait_for_log(router, N)
    hits = router.upstream_hits()
    assert hits == {upstream_address(first.base_url): spread[0], upstream_address(second.base_url): spread[1]}

    second.process.stop()
    survivor_before = sample(first.root_url, DONE)
    later = await asyncio.gather(*(read_page(client, N + i) for i in range(N)))
    assert {"".join(c.text for c in chunks) for chunks in later} == texts
    assert [chunks[-1].finish_reason for chunks in later] == ["length"] * N
    assert sample(first.root_url, DONE) - survivor_before == N
    wait_for_log(router, 2 * N)
    assert router.upstream_hits() == {upstream_address(first.base_url): spread[0] + N,
                                      upstream_address(second.base_url): spread[1]}
    assert (await client.health()).status == "up"
