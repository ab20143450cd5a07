"""Engine faults seen through the running app: each gets its own message, streamed text survives, the app lives on.

The app runs on a socket (uvicorn, the real ``create_app``) in front of the scripted fake engine. Each
fault is injected at the engine's wire level, and the test reads what a user of ``POST /api/ocr`` gets.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import corpus
from tests.support.fake_engine import FakeEngine, Reply, settings_for
from tests.support.live_app import LiveApp

PNG = base64.b64encode(corpus.png_bytes(320, 240)).decode()
PDF3 = base64.b64encode(corpus.pdf_bytes(3)).decode()
LONG = "第一行 first line ✓ " * 20  # long enough to be cut in the middle


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngine]:
    with FakeEngine() as fake:
        yield fake


@pytest.fixture(scope="module")
def app(engine: FakeEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApp]:
    log_dir = str(tmp_path_factory.mktemp("logs"))
    # Short timeouts keep hangs short; no retries and no breaker, so every fault shows as itself.
    settings = settings_for(engine, app={"log_dir": log_dir},
                            client={"idle_timeout_s": 1, "total_timeout_s": 3, "max_retries": 0},
                            admission={"enabled": False})
    with LiveApp(settings) as live:
        yield live


@pytest.fixture(autouse=True)
def engine_is_up_and_scripted_afresh(engine: FakeEngine) -> Iterator[None]:
    yield
    with engine._lock:  # a test that failed half-way must not leave replies for the next one
        engine._queue.clear()
    engine.health_status = 200


def post(app: LiveApp, file: str = PNG, **body: Any) -> httpx.Response:
    return httpx.post(app.url + "/api/ocr", json={"file": file, **body}, timeout=60)


def events(app: LiveApp, file: str = PNG, **body: Any) -> list[dict[str, Any]]:
    with httpx.stream("POST", app.url + "/api/ocr", json={"file": file, "stream": True, **body}, timeout=60) as r:
        assert r.status_code == 200
        return [json.loads(line) for line in r.iter_lines() if line]


def streamed_text(evts: list[dict[str, Any]], page: int = 1) -> str:
    return "".join(e["delta"] for e in evts if e["event"] == "page" and e["page"] == page)


FAULTS = [  # (reply, HTTP status of a one-page request, error code, a fragment of its message)
    (Reply(text=LONG, fault="close", fault_after=4), 502, "stream_broken", "broke in the middle of the answer"),
    (Reply(text=LONG, fault="malformed", fault_after=4), 502, "stream_broken", "malformed chunk"),
    (Reply(text=LONG, fault="error_event", fault_after=4), 502, "stream_broken", "reported an error in the middle"),
    (Reply(fault="hang"), 504, "engine_timeout", "sent nothing for 1 s"),
    (Reply(text=LONG, token_delay=0.3), 504, "engine_timeout", "longer than 3 s"),
    (Reply(status=400, message="bad", param="temperature"), 422, "engine_rejected", "parameter 'temperature'"),
    (Reply(status=400, message="too long", param="input_tokens"), 422, "engine_rejected", "engine.max_model_len"),
    (Reply(status=500, message="CUDA error at /opt/vllm/x.py"), 502, "engine_error", "HTTP 500"),
    (Reply(status=503, message="overloaded"), 503, "engine_busy", "busy"),
]
FAULT_IDS = ["killed_mid_stream", "malformed_chunk", "error_event", "hung", "slow_trickle", "http_400",
             "http_400_context", "http_500", "http_503"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("reply", "status", "code", "fragment"), FAULTS, ids=FAULT_IDS)
def test_each_engine_fault_gets_its_own_status_code_and_message(app: LiveApp, engine: FakeEngine, reply: Reply,
                                                                status: int, code: str, fragment: str) -> None:
    engine.push(reply)
    response = post(app)
    assert response.status_code == status
    answer = response.json()
    assert answer["error"]["code"] == code and fragment in answer["error"]["message"], answer["error"]
    page = answer["pages"][0]
    assert page["status"] == "failed" and page["error_code"] == code
    assert "/opt/vllm" not in response.text and "Traceback" not in response.text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("reply", [Reply(text=LONG, fault="close", fault_after=4),
                                   Reply(text=LONG, fault="malformed", fault_after=4),
                                   Reply(text=LONG, token_delay=0.3)], ids=["killed", "malformed", "trickle"])
def test_text_streamed_before_a_fault_stays_in_the_events_and_the_final_answer(app: LiveApp, engine: FakeEngine,
                                                                              reply: Reply) -> None:
    engine.push(reply)
    evts = events(app)
    partial = streamed_text(evts)
    assert partial and LONG.startswith(partial) and len(partial) < len(LONG)
    done = evts[-1]
    assert done["event"] == "done" and done["pages"][0]["status"] == "failed"
    assert done["pages"][0]["text"] == partial


@pytest.mark.timeout(60)
def test_a_fault_on_one_page_keeps_the_pages_around_it(app: LiveApp, engine: FakeEngine) -> None:
    engine.push(Reply(text="page one"), Reply(text=LONG, fault="close", fault_after=3), Reply(text="page three"))
    response = post(app, PDF3)
    assert response.status_code == 200  # something was read: the answer is a success with a failed page
    pages = response.json()["pages"]
    assert [p["status"] for p in pages] == ["done", "failed", "done"]
    assert pages[0]["text"] == "page one" and pages[2]["text"] == "page three"
    assert pages[1]["error_code"] == "stream_broken" and pages[1]["text"]


@pytest.mark.timeout(60)
def test_an_engine_killed_mid_stream_fails_the_page_and_the_next_request_works_once_it_is_back(
        app: LiveApp, engine: FakeEngine) -> None:
    engine.push(Reply(text=LONG, token_delay=0.05))
    seen: list[dict[str, Any]] = []
    with httpx.stream("POST", app.url + "/api/ocr", json={"file": PDF3, "stream": True}, timeout=60) as response:
        for line in response.iter_lines():
            seen.append(json.loads(line))
            if len(streamed_text(seen)) > 10 and engine.in_flight:
                engine.down()  # the process dies: its socket goes away mid-answer (up() reuses the port)
    pages = seen[-1]["pages"]
    assert pages[0]["status"] == "failed" and pages[0]["error_code"] == "stream_broken"
    assert pages[0]["text"] == streamed_text(seen) and pages[0]["text"]
    # The job stops instead of failing the next pages one by one, and says why on each of them.
    assert {p["error_code"] for p in pages[1:]} == {"engine_unavailable"}
    assert "not reachable" in pages[1]["error"]
    assert httpx.get(app.url + "/healthz", timeout=30).status_code == 503
    engine.up()
    ok = post(app)
    assert ok.status_code == 200 and ok.json()["pages"][0]["status"] == "done"
    assert httpx.get(app.url + "/healthz", timeout=30).json()["engine"]["status"] == "up"


@pytest.mark.timeout(60)
def test_a_restarting_engine_is_reported_as_unavailable_then_works_without_restarting_the_app(
        app: LiveApp, engine: FakeEngine) -> None:
    engine.down()
    try:
        refused = post(app)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "engine_unavailable"
        assert "starting up or stopped" in refused.json()["error"]["message"]
        health = httpx.get(app.url + "/healthz", timeout=30)
        assert health.status_code == 503 and health.json()["app"] == "ok"
    finally:
        engine.up()
    engine.health_status = 503  # listening again, model still loading
    assert httpx.get(app.url + "/healthz", timeout=30).status_code == 503
    engine.health_status = 200
    assert post(app).json()["pages"][0]["status"] == "done"


@pytest.mark.timeout(90)
def test_a_hung_request_does_not_hold_up_another_clients_request(tmp_path: Path) -> None:
    with FakeEngine() as engine:
        settings = settings_for(engine, app={"log_dir": str(tmp_path)}, client={"idle_timeout_s": 30, "max_retries": 0},
                                admission={"enabled": False})
        with LiveApp(settings) as live:
            engine.push(Reply(fault="hang"))
            hung: dict[str, Any] = {}

            def first_client() -> None:
                hung["response"] = post(live)

            thread = threading.Thread(target=first_client)
            thread.start()
            assert engine.wait_until(lambda: engine.in_flight == 1)
            other = post(live, base64.b64encode(corpus.jpeg_bytes(300, 200)).decode(), preset="markdown")
            assert other.status_code == 200 and other.json()["pages"][0]["status"] == "done"
            # The first one still hangs meanwhile. The fake counts the other one out only after its handler
            # has finished writing, which can be just after the app answered: wait for that, don't race it.
            assert thread.is_alive() and engine.wait_until(lambda: engine.in_flight == 1)
            assert httpx.get(live.url + "/healthz", timeout=30).json()["app"] == "ok"
            engine.down()  # end the hang: the engine dies under it
            thread.join(30)
            engine.up()
            assert hung["response"].status_code == 503
            assert hung["response"].json()["error"]["code"] == "engine_unavailable"
            assert post(live).json()["pages"][0]["status"] == "done"
