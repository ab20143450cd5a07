"""/healthz, /metrics and POST /api/ocr on the real app (real service, real client) against the fake engine."""

from __future__ import annotations

import base64
import io
import json
import socket
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from app import create_app
from ocr_ui.config import Settings
from tests.integration.conftest import settings_for
from tests.support.fake_engine import FakeEngine, Reply, split_text
from tests.support.live_app import LiveApp


def png_bytes(size: tuple[int, int] = (640, 480)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, "white").save(buffer, "PNG")
    return buffer.getvalue()


def pdf_bytes(pages: int) -> bytes:
    images = [Image.new("RGB", (612, 792), "white") for _ in range(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, "PDF", save_all=True, append_images=images[1:], resolution=72)
    return buffer.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def quick(engine: FakeEngine, **sections: dict) -> Settings:
    client = {"idle_timeout_s": 3, "total_timeout_s": 20, "max_retries": 0, **sections.pop("client", {})}
    return settings_for(engine, client=client, admission={"enabled": False}, **sections)


@pytest.fixture
def api(fake_engine: FakeEngine, tmp_path) -> Iterator[TestClient]:
    with TestClient(create_app(quick(fake_engine, app={"log_dir": str(tmp_path)}))) as client:
        yield client


def test_healthz_reports_the_engine_up_with_200(api: TestClient) -> None:
    r = api.get("/healthz")
    assert r.status_code == 200
    assert r.json()["app"] == "ok" and r.json()["engine"]["status"] == "up"


def test_healthz_is_json_with_503_when_the_engine_is_down(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.down()
    r = api.get("/healthz")
    assert r.status_code == 503
    body = r.json()
    assert body["app"] == "ok" and body["engine"]["status"] == "down"
    assert "not reachable" in body["engine"]["detail"]


def test_metrics_serve_prometheus_text_with_the_app_series(api: TestClient) -> None:
    api.post("/api/ocr", json={"file": b64(png_bytes()), "preset": "text"})
    r = api.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert "# TYPE ocr_ui_pages_total counter" in r.text
    assert 'ocr_ui_pages_total{outcome="ok"} 1.0' in r.text
    assert 'ocr_ui_output_tokens_total{preset="text"}' in r.text


def test_api_returns_every_page_of_a_pdf(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.push(Reply(text="第一页 text"), Reply(text="second page"))
    r = api.post("/api/ocr", json={"file": b64(pdf_bytes(2)), "filename": "two.pdf", "preset": "text"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["done"] is True and len(body["request_id"]) == 12
    assert [(p["page"], p["status"], p["text"]) for p in body["pages"]] == [
        (1, "done", "第一页 text"), (2, "done", "second page")]
    assert all(p["finish_reason"] == "stop" and p["error"] is None for p in body["pages"])


def test_api_spotting_pages_carry_boxes_in_pixels_and_in_model_units(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.push(Reply(text='[{"box": [100, 200, 500, 400], "text": "hello"}]'))
    r = api.post("/api/ocr", json={"file": b64(png_bytes((640, 480))), "preset": "spotting"})
    assert r.status_code == 200, r.text
    assert r.json()["pages"][0]["boxes"] == [{"text": "hello", "box": [64, 96, 320, 192], "box_norm": [100, 200, 500, 400]}]


def test_api_streams_ndjson_deltas_that_add_up_to_the_final_text(api: TestClient, fake_engine: FakeEngine) -> None:
    text = "流式 streaming answer, piece by piece ✓"
    fake_engine.push(Reply(chunks=split_text(text, 4)))
    with api.stream("POST", "/api/ocr", json={"file": b64(png_bytes()), "preset": "text", "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        events = [json.loads(line) for line in r.iter_lines() if line]
    deltas = [e["delta"] for e in events if e["event"] == "page" and e["delta"]]
    assert len(deltas) >= 2
    assert "".join(deltas) == text
    assert events[-1]["event"] == "done" and events[-1]["pages"][0]["text"] == text
    assert next(e["status"] for e in events if e["event"] == "page") == "queued"
    # The answer says where the page's time went (the load test reads queue wait and render time here).
    done = events[-1]["pages"][0]
    assert done["image_tokens"] > 0 and done["degraded"] is False
    timings = done["timings"]
    assert set(timings) == {"render_s", "queue_wait_s", "ttft_s", "elapsed_s"}
    assert 0 <= timings["render_s"] <= timings["ttft_s"] <= timings["elapsed_s"]


def test_a_fast_stream_is_coalesced_into_few_lines_with_the_first_text_at_once(fake_engine: FakeEngine,
                                                                               tmp_path) -> None:
    chunks = [f"w{i}字 " for i in range(500)]
    fake_engine.push(Reply(chunks=chunks))
    settings = quick(fake_engine, app={"log_dir": str(tmp_path), "stream_flush_s": 2})
    with TestClient(create_app(settings)) as api, api.stream(
            "POST", "/api/ocr", json={"file": b64(png_bytes()), "preset": "text", "stream": True}) as r:
        events = [json.loads(line) for line in r.iter_lines() if line]
    deltas = [e["delta"] for e in events if e["event"] == "page" and e["delta"]]
    assert deltas[0] == chunks[0]  # the first chunk went out alone, not held for the interval
    assert len(events) < 50  # not a line per chunk
    assert "".join(deltas) == "".join(chunks) == events[-1]["pages"][0]["text"]
    assert events[-1]["pages"][0]["output_tokens"] == 500


@pytest.mark.parametrize(("body", "status", "code", "words"), [
    ({"file": "%%%not base64%%%", "preset": "text"}, 400, "invalid_options", "base64"),
    ({"preset": "text"}, 400, "invalid_options", "needs the field 'file'"),
    ({"file": b64(png_bytes()), "preset": "nonsense"}, 400, "invalid_options", "Unknown task"),
    ({"file": b64(png_bytes()), "preset": "text", "colour": "red"}, 400, "invalid_options", "Unknown field 'colour'"),
    ({"file": b64(png_bytes()), "preset": "fields"}, 400, "invalid_options", "field name"),
    ({"file": b64(png_bytes()), "preset": "text", "max_tokens": 0}, 400, "invalid_options", "max_tokens"),
    ({"file": b64(b""), "preset": "text"}, 400, "empty_file", "empty"),
    ({"file": b64(b"just some text, not an image"), "preset": "text"}, 415, "unsupported_type", ""),
    ({"file": b64(png_bytes()[:60]), "preset": "text"}, 400, "corrupt_file", ""),
    ({"file": b64(pdf_bytes(2)), "preset": "text", "pages": "5-9"}, 400, "invalid_page_range", ""),
])
def test_each_bad_input_gets_its_own_code_and_message(api: TestClient, body: dict, status: int, code: str,
                                                     words: str) -> None:
    r = api.post("/api/ocr", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code
    assert words in error["message"]
    assert "/tmp" not in error["message"] and "Traceback" not in error["message"]


def test_a_body_that_is_not_json_is_refused_clearly(api: TestClient) -> None:
    r = api.post("/api/ocr", content=b"\x00\x01 nope", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "The request body must be a JSON object."


def test_the_engine_being_down_gives_503_with_a_clear_message(api: TestClient, fake_engine: FakeEngine) -> None:
    fake_engine.down()
    r = api.post("/api/ocr", json={"file": b64(png_bytes()), "preset": "text"})
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["error"]["code"] in ("engine_unavailable", "engine_starting")
    assert "engine" in body["error"]["message"].lower()
    assert body["pages"][0]["status"] == "failed"


def test_a_token_is_required_when_tokens_are_configured(fake_engine: FakeEngine, tmp_path) -> None:
    settings = quick(fake_engine, app={"api_tokens": "[secret-one, secret-two]", "log_dir": str(tmp_path)})
    with TestClient(create_app(settings)) as client:
        body = {"file": b64(png_bytes()), "preset": "text"}
        missing = client.post("/api/ocr", json=body)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert missing.json()["error"]["code"] == "access_denied"
        wrong = client.post("/api/ocr", json=body, headers={"Authorization": "Bearer secret-three"})
        assert wrong.status_code == 401 and wrong.json()["error"]["message"] == "The API token is not valid."
        ok = client.post("/api/ocr", json=body, headers={"Authorization": "Bearer secret-two"})
        assert ok.status_code == 200, ok.text
        assert client.get("/healthz").status_code == 200  # health stays open for probes


def test_each_client_is_rate_limited_per_minute(fake_engine: FakeEngine, tmp_path) -> None:
    settings = quick(fake_engine, app={"rate_limit_per_minute": 2, "log_dir": str(tmp_path)})
    with TestClient(create_app(settings)) as client:
        body = {"file": b64(png_bytes()), "preset": "text"}
        assert [client.post("/api/ocr", json=body).status_code for _ in range(2)] == [200, 200]
        third = client.post("/api/ocr", json=body)
        assert third.status_code == 429
        assert third.json()["error"]["code"] == "rate_limited"
        assert "at most 2 per minute" in third.json()["error"]["message"]


def test_a_large_body_is_refused_from_its_content_length_before_it_is_read(fake_engine: FakeEngine, tmp_path) -> None:
    # A real socket: announce 50 MB and send none of it. The answer must come without waiting for the body.
    settings = quick(fake_engine, app={"max_upload_mb": 1, "log_dir": str(tmp_path)})
    with LiveApp(settings) as live, socket.create_connection(("127.0.0.1", live.port), timeout=10) as sock:
        sock.sendall(b"POST /api/ocr HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 52428800\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            piece = sock.recv(65536)
            if not piece:
                break
            answer += piece
    answer = answer.decode("utf-8", "replace")
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    assert '"code":"file_too_large"' in answer.replace(" ", "")
    assert "1 MB" in answer


def test_a_decoded_file_over_the_limit_is_refused(fake_engine: FakeEngine, tmp_path) -> None:
    settings = quick(fake_engine, app={"max_upload_mb": 1, "log_dir": str(tmp_path)})
    with TestClient(create_app(settings)) as client:
        r = client.post("/api/ocr", json={"file": b64(b"\x89PNG" + b"\0" * 1_100_000), "preset": "text"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "file_too_large"


def test_a_streaming_client_that_leaves_closes_the_engine_request(fake_engine: FakeEngine, tmp_path) -> None:
    fake_engine.push(Reply(chunks=split_text("word " * 200, 5), token_delay=0.1))
    with LiveApp(quick(fake_engine, app={"log_dir": str(tmp_path)})) as live:
        body = {"file": b64(png_bytes()), "preset": "text", "stream": True}
        with httpx.stream("POST", live.url + "/api/ocr", json=body, timeout=30) as r:
            for line in r.iter_lines():
                if json.loads(line).get("delta"):
                    break  # the first text arrived: hang up
        assert fake_engine.wait_until(lambda: fake_engine.disconnects == 1, timeout=10)
        assert fake_engine.completed == 0


def test_the_rate_limit_window_slides_with_the_clock() -> None:
    from ocr_ui.errors import RateLimited
    from ocr_ui.web_api import RateLimiter

    now = [1000.0]
    limiter = RateLimiter(2, clock=lambda: now[0])
    limiter.check("a")
    limiter.check("a")
    limiter.check("b")  # another client has its own budget
    with pytest.raises(RateLimited, match="Try again in 60 s"):
        limiter.check("a")
    now[0] += 60.5
    limiter.check("a")  # the first two requests left the window
