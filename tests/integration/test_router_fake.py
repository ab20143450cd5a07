"""The nginx router (Debian's nginx, config from ocr_ui.router_config) in front of two scripted engines.

The fast twin of tests/e2e/test_router_vllm.py: real nginx, real sockets, the app's EngineClient;
only the engines are fakes, so faults (a 503, a stream cut in the middle) can be scripted.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest

from ocr_ui.client import Chunk, EngineClient
from ocr_ui.config import Settings, load_config
from ocr_ui.errors import StreamBroken
from tests.support.fake_engine import FakeEngine, Reply, default_text
from tests.support.router import Router, require_nginx, running_router, wait_for_log

pytestmark = pytest.mark.anyio

N = 8


def router_settings(base_url: str) -> Settings:
    # No client retries: every failover seen here is nginx's doing.
    return load_config(None, {"OCR_UI__ENGINE__BASE_URL": base_url, "OCR_UI__CLIENT__MAX_RETRIES": "0",
                              "OCR_UI__CLIENT__IDLE_TIMEOUT_S": "10", "OCR_UI__CLIENT__TOTAL_TIMEOUT_S": "30"})


@pytest.fixture
def engines() -> Iterator[tuple[FakeEngine, FakeEngine]]:
    with FakeEngine() as a, FakeEngine() as b:
        yield a, b


@pytest.fixture
def router(tmp_path: Path, engines: tuple[FakeEngine, FakeEngine]) -> Iterator[Router]:
    require_nginx()
    a, b = engines
    with running_router(tmp_path / "nginx", load_config(None, {}), [a.base_url, b.base_url]) as running:
        yield running


@pytest.fixture
async def client(router: Router) -> AsyncIterator[EngineClient]:
    engine_client = EngineClient(router_settings(router.base_url))
    yield engine_client
    await engine_client.close()


def messages(prompt: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": prompt}]}]


async def read_all(client: EngineClient, prompt: str) -> list[Chunk]:
    stream = client.stream(messages(prompt), max_tokens=64, sampling={"temperature": 0.0}, extra_body={},
                           request_id=f"r{abs(hash(prompt)) % 10**8}")
    async with contextlib.aclosing(stream) as chunks:
        return [chunk async for chunk in chunks]


async def test_requests_spread_over_both_engines_and_all_survive_one_going_down(
        engines: tuple[FakeEngine, FakeEngine], router: Router, client: EngineClient) -> None:
    a, b = engines
    # Held open a little so least_conn sees the others in flight and sends the next one elsewhere.
    a.default = b.default = Reply(token_delay=0.02)
    prompts = [f"第 {i} 页" for i in range(N)]
    answers = await asyncio.gather(*(read_all(client, p) for p in prompts))
    assert ["".join(c.text for c in chunks) for chunks in answers] == [default_text(p) for p in prompts]
    assert len(a.requests) >= 1 and len(b.requests) >= 1
    assert len(a.requests) + len(b.requests) == N
    wait_for_log(router, N)
    hits = router.upstream_hits()
    assert hits == {f"127.0.0.1:{a.port}": len(a.requests), f"127.0.0.1:{b.port}": len(b.requests)}

    a.down()
    served_by_a = len(a.requests)
    later = [f"after {i}" for i in range(N)]
    answers = await asyncio.gather(*(read_all(client, p) for p in later))
    assert ["".join(c.text for c in chunks) for chunks in answers] == [default_text(p) for p in later]
    assert all(chunks[-1].finish_reason == "stop" for chunks in answers)
    assert len(a.requests) == served_by_a
    assert sorted(r["messages"][0]["content"][0]["text"] for r in b.requests[-N:]) == later


async def test_streamed_chunks_reach_the_client_while_the_engine_is_still_generating(
        engines: tuple[FakeEngine, FakeEngine], client: EngineClient) -> None:
    a, b = engines
    a.default = b.default = Reply(chunks=["一", "二", "三", "四"], token_delay=0.3)
    stream = client.stream(messages("slow page"), max_tokens=64, sampling={}, extra_body={}, request_id="slow")
    async with contextlib.aclosing(stream) as chunks:
        first = await anext(chunks)
        # The first piece arrives while the engine still holds the request open for the rest.
        assert first.text == "一"
        assert a.in_flight + b.in_flight == 1
        rest = [chunk.text async for chunk in chunks]
    assert "".join(rest) == "二三四"


async def test_an_engine_answering_503_is_skipped_and_the_request_served_by_the_other(
        engines: tuple[FakeEngine, FakeEngine], client: EngineClient) -> None:
    a, b = engines
    a.responder = lambda body: Reply(status=503, message="overloaded")
    answers = [await read_all(client, f"page {i}") for i in range(4)]
    assert ["".join(c.text for c in chunks) for chunks in answers] == [default_text(f"page {i}") for i in range(4)]
    assert len(a.requests) >= 1  # round robin among idle engines sent at least one request to a first
    # The fake counts an answer once its handler has finished writing, a moment after the client read it.
    assert await asyncio.to_thread(b.wait_until, lambda: b.completed == 4)


async def test_a_stream_broken_mid_answer_fails_once_and_is_not_replayed_on_the_other_engine(
        engines: tuple[FakeEngine, FakeEngine], client: EngineClient) -> None:
    a, b = engines

    def cut_when_asked(body: dict) -> Reply:
        broken = "BREAK" in body["messages"][0]["content"][0]["text"]
        return Reply(fault="close", fault_after=2) if broken else Reply()

    a.responder = b.responder = cut_when_asked
    with pytest.raises(StreamBroken):
        await read_all(client, "BREAK here")
    assert len(a.requests) + len(b.requests) == 1
    after = await read_all(client, "next page")
    assert "".join(c.text for c in after) == default_text("next page")


async def test_router_health_is_up_while_one_engine_lives_and_down_when_none_does(
        engines: tuple[FakeEngine, FakeEngine], client: EngineClient) -> None:
    a, b = engines
    a.down()
    assert (await client.health()).status == "up"
    b.down()
    state = await client.health()
    assert state.status == "down"
    assert "502" in state.detail  # nginx: no live upstream


async def test_metrics_through_the_router_are_one_engines_text(router: Router) -> None:
    async with httpx2.AsyncClient() as http:
        response = await http.get(f"{router.root_url}/metrics")
    assert response.status_code == 200
    assert response.text.count("vllm:num_requests_running{") == 1  # one engine, not a sum or a concatenation


async def test_closing_a_stream_at_the_router_closes_it_at_the_engine(
        engines: tuple[FakeEngine, FakeEngine], client: EngineClient) -> None:
    a, b = engines
    a.default = b.default = Reply(chunks=[f"{i} " for i in range(200)], token_delay=0.05)
    stream = client.stream(messages("long page"), max_tokens=512, sampling={}, extra_body={}, request_id="stop")
    async with contextlib.aclosing(stream) as chunks:
        assert (await anext(chunks)).text == "0 "
    # The user pressed Stop: nginx must drop the engine's connection too, so vLLM aborts the request.
    closed = await asyncio.to_thread(a.wait_until, lambda: a.disconnects + b.disconnects == 1)
    assert closed
    assert a.completed + b.completed == 0
