"""Access control and exposure, checked on the running app: what reaches the engine, what a caller can name.

Covers: loopback binds by default, the engine's API key, nothing fetched from a URL or read from a
server path that a caller names (JSON API and Gradio API alike), uploads kept in a private folder and
deleted at shutdown, model output made safe before the UI renders it, and no secret echoed anywhere.
Bearer tokens and the rate limit themselves are covered in ``test_web_api.py``.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from ocr_ui.config import Settings, load_config, process_environ
from ocr_ui.engine_args import render
from ocr_ui.ui_uploads import UPLOADS_ONLY
from tests.support import corpus
from tests.support.fake_engine import FakeEngine, Reply, settings_for
from tests.support.live_app import LiveApp

ROOT = Path(__file__).resolve().parents[2]
PNG = corpus.png_bytes(320, 240)
ENGINE_KEY = "engine-key-5f1e"
# The Run event's inputs: files, preset, fields, target, question, hint, pages, prompt, max tokens,
# UI language, auto prompt, history.
RUN_INPUTS = ["text", "", "English", "", "", "", "", 256, "en", "", []]
RENDERED = 2


def quick(fake: FakeEngine, tmp_path: Path, **sections: dict[str, Any]) -> Settings:
    app = {"log_dir": str(tmp_path / "logs"), **sections.pop("app", {})}
    return settings_for(fake, app=app, client={"max_retries": 0, "idle_timeout_s": 5},
                        admission={"enabled": False}, **sections)


class CountingServer:
    """A loopback HTTP server that counts every request: nothing in the app should ever call it."""

    def __init__(self) -> None:
        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the stdlib's name
                hits.append(self.path)
                self.send_response(200)
                self.send_header("content-type", "image/png")
                self.end_headers()
                self.wfile.write(PNG)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def bait() -> Iterator[CountingServer]:
    server = CountingServer()
    yield server
    server.close()


def gradio_run(url: str, files: list[dict[str, Any]], cookies: httpx.Cookies | None = None) -> tuple[str, Any]:
    """Call the UI's Run event through Gradio's HTTP API: ("complete", outputs) or ("error", message)."""
    with httpx.Client(base_url=url, timeout=60, cookies=cookies) as client:
        started = client.post("/gradio_api/call/ocr", json={"data": [files, *RUN_INPUTS]})
        started.raise_for_status()
        event_id = started.json()["event_id"]
        with client.stream("GET", f"/gradio_api/call/ocr/{event_id}") as stream:
            lines = [line for line in stream.iter_lines() if line]
    kind = lines[-2].removeprefix("event: ")
    payload = json.loads(lines[-1].removeprefix("data: "))
    return kind, payload if kind == "complete" else payload["error"]


def upload(url: str, data: bytes, name: str = "scan.png") -> str:
    response = httpx.post(url + "/gradio_api/upload", files={"files": (name, data, "image/png")}, timeout=30)
    response.raise_for_status()
    return response.json()[0]


def file_data(path: str) -> list[dict[str, Any]]:
    return [{"path": path, "meta": {"_type": "gradio.FileData"}}]


# ------------------------------------------------------------------------------------- binds


def test_the_app_and_the_engine_bind_to_loopback_by_default() -> None:
    settings = load_config(ROOT / "config.yaml", {})
    assert settings.app.host == "127.0.0.1" and settings.engine.host == "127.0.0.1"
    assert Settings().app.host == "127.0.0.1" and Settings().engine.host == "127.0.0.1"
    flags = render(settings)
    assert flags[flags.index("--host") + 1] == "127.0.0.1"
    assert settings.app.share is False and settings.app.api_tokens == []


@pytest.mark.timeout(120)
def test_python_app_py_listens_on_loopback_only(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**process_environ(), "OCR_UI__APP__PORT": str(port), "OCR_UI__APP__LOG_DIR": str(tmp_path),
           "OCR_UI__ENGINE__BASE_URL": "http://127.0.0.1:9/v1", "OCR_UI__METRICS__NVML": "false"}
    env.pop("OCR_UI__APP__HOST", None)
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        listening: list[Any] = []
        deadline = time.monotonic() + 90
        while not listening and time.monotonic() < deadline and proc.poll() is None:
            listening = [c.laddr for c in psutil.Process(proc.pid).net_connections("inet")
                         if c.status == psutil.CONN_LISTEN]
            time.sleep(0.3)
        assert listening, "the app never listened"
        assert {addr.ip for addr in listening} == {"127.0.0.1"} and {addr.port for addr in listening} == {port}
    finally:
        proc.terminate()
        proc.wait(30)


# ------------------------------------------------------------------------------------- engine key


@pytest.mark.timeout(120)
def test_the_app_sends_the_engine_key_and_says_clearly_when_it_is_wrong(tmp_path: Path) -> None:
    with FakeEngine(api_key=ENGINE_KEY) as engine:
        with LiveApp(quick(engine, tmp_path, engine={"api_key": ENGINE_KEY})) as live:
            ok = httpx.post(live.url + "/api/ocr", json={"file": base64.b64encode(PNG).decode()}, timeout=60)
            assert ok.status_code == 200 and ok.json()["pages"][0]["status"] == "done"
            assert engine.headers[-1]["authorization"] == f"Bearer {ENGINE_KEY}"
            assert httpx.get(live.url + "/healthz", timeout=30).status_code == 200
        with LiveApp(quick(engine, tmp_path, engine={"api_key": "not-the-key"})) as live:
            assert engine.wait_until(lambda: engine.in_flight == 0)  # the last answer is counted once written
            before = engine.completed
            refused = httpx.post(live.url + "/api/ocr", json={"file": base64.b64encode(PNG).decode()}, timeout=60)
            health = httpx.get(live.url + "/healthz", timeout=30)
            metrics = httpx.get(live.url + "/metrics", timeout=30).text
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "engine_rejected"
        assert "engine.api_key" in refused.json()["error"]["message"]
        assert health.status_code == 503 and "API key" in health.json()["engine"]["detail"]
        assert engine.completed == before
        for text in (refused.text, health.text, metrics):
            assert ENGINE_KEY not in text and "not-the-key" not in text


# ------------------------------------------------------------------------------------- nothing fetched


@pytest.mark.timeout(120)
def test_the_json_api_never_fetches_a_url_or_reads_a_path_named_as_the_file(fake_engine: FakeEngine, tmp_path: Path,
                                                                           bait: CountingServer) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(corpus.png_bytes(text="SECRET"))
    attempts = {
        f"{bait.url}/scan.png": 400, "file://" + str(secret): 400, str(secret): 400,
        base64.b64encode(f"{bait.url}/scan.png".encode()).decode(): 415,
        base64.b64encode(str(secret).encode()).decode(): 415,
        "data:text/uri-list;base64," + base64.b64encode(f"{bait.url}/scan.png".encode()).decode(): 415,
    }
    with LiveApp(quick(fake_engine, tmp_path)) as live:
        for value, status in attempts.items():
            response = httpx.post(live.url + "/api/ocr", json={"file": value, "filename": str(secret)}, timeout=60)
            assert response.status_code == status, (value, response.text)
            assert str(secret) not in response.text and bait.url not in response.text
        assert fake_engine.requests == [] and bait.hits == []
        # A data: URL prefix is just a wrapper around the bytes, and what the engine gets is a fresh data: URL.
        sent = httpx.post(live.url + "/api/ocr", timeout=60,
                          json={"file": "data:image/png;base64," + base64.b64encode(PNG).decode()})
        assert sent.status_code == 200
    urls = [part["image_url"]["url"] for body in fake_engine.requests for message in body["messages"]
            if isinstance(message["content"], list) for part in message["content"] if part["type"] == "image_url"]
    assert len(urls) == 1 and urls[0].startswith("data:image/jpeg;base64,")


@pytest.mark.timeout(120)
def test_the_gradio_api_reads_only_files_uploaded_through_the_app(fake_engine: FakeEngine, tmp_path: Path,
                                                                  bait: CountingServer) -> None:
    secret = tmp_path / "secret.png"  # an image on the server's disk that nobody uploaded
    secret.write_bytes(corpus.png_bytes(text="SECRET"))
    probes = [str(secret), os.path.relpath(secret, ROOT), "file://" + str(secret), f"{bait.url}/scan.png",
              "http://example.invalid/scan.png", "data:image/png;base64," + base64.b64encode(PNG).decode(),
              str(ROOT / "artifacts" / "screenshots" / "03-done.png")]
    with LiveApp(quick(fake_engine, tmp_path)) as live:
        for probe in probes:
            kind, message = gradio_run(live.url, file_data(probe))
            assert (kind, message) == ("error", UPLOADS_ONLY), probe
        assert fake_engine.requests == [] and bait.hits == []
        kind, _ = gradio_run(live.url, file_data(upload(live.url, PNG)))  # the same file, uploaded
        assert kind == "complete" and len(fake_engine.requests) == 1


# ------------------------------------------------------------------------------------- uploads


def test_building_the_ui_writes_no_generated_stub_files_into_the_package() -> None:
    # Subclassing a Gradio component makes Gradio write a .pyi copy of the module at import; the upload
    # guard wraps an instance instead, so the package stays as checked in (and mypy reads the real code).
    assert sorted(p.name for p in (ROOT / "ocr_ui").glob("*.pyi")) == []



@pytest.mark.timeout(120)
def test_uploads_live_in_a_private_folder_and_are_deleted_when_the_app_stops(fake_engine: FakeEngine,
                                                                           tmp_path: Path) -> None:
    live = LiveApp(quick(fake_engine, tmp_path)).start()
    try:
        folder = Path(os.environ["GRADIO_TEMP_DIR"])  # set by create_app before Gradio is built
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()
        assert live.app is not None
        path = Path(upload(live.url, PNG))
        assert path.is_relative_to(folder) and path.read_bytes() == PNG
        kind, _ = gradio_run(live.url, file_data(str(path)))
        assert kind == "complete"
        assert path.exists()  # kept while the page may run it again (another preset, another range)
    finally:
        live.stop()
    assert not path.exists()  # Gradio's delete_cache removes this app's uploads at shutdown


# ------------------------------------------------------------------------------------- output and secrets

HOSTILE_OUTPUT = ('<img src=x onerror="alert(1)"><script>alert(2)</script> <a href="javascript:alert(3)">x</a> '
                  '<iframe src="https://evil.example"></iframe> **bold** <b onclick="alert(4)">b</b>')


@pytest.mark.timeout(120)
def test_model_output_is_made_safe_before_the_ui_renders_it(fake_engine: FakeEngine, tmp_path: Path) -> None:
    fake_engine.push(Reply(text=HOSTILE_OUTPUT))
    with LiveApp(quick(fake_engine, tmp_path)) as live:
        kind, outputs = gradio_run(live.url, file_data(upload(live.url, PNG)))
    assert kind == "complete"
    rendered = outputs[RENDERED] if isinstance(outputs[RENDERED], str) else outputs[RENDERED]["value"]
    lowered = rendered.lower()
    for dangerous in ("<script", "onerror", "onclick", "javascript:", "<iframe", "evil.example"):
        assert dangerous not in lowered, dangerous
    assert "bold" in rendered  # the text itself survives


@pytest.mark.timeout(120)
def test_no_secret_is_echoed_and_the_schema_pages_are_off(fake_engine: FakeEngine, tmp_path: Path) -> None:
    settings = quick(fake_engine, tmp_path, app={"api_tokens": "[api-token-9c2a]", "login_user": "ops",
                                                 "login_password": "pw-77e1"})
    with LiveApp(settings) as live:
        bodies = [httpx.get(live.url + path, timeout=30) for path in ("/healthz", "/metrics", "/config")]
        bodies.append(httpx.post(live.url + "/api/ocr", json={"file": "x"}, timeout=30,
                                 headers={"authorization": "Bearer api-token-9c2a-wrong"}))
        for response in bodies:
            assert "api-token-9c2a" not in response.text and "pw-77e1" not in response.text
        for path in ("/docs", "/redoc", "/openapi.json"):
            response = httpx.get(live.url + path, timeout=30)
            assert response.status_code != 200 or '"openapi"' not in response.text, path


@pytest.mark.timeout(120)
def test_with_a_login_the_gradio_api_refuses_callers_without_a_session(fake_engine: FakeEngine, tmp_path: Path) -> None:
    # api_tokens guard /api/ocr; the UI and its Gradio API are guarded by the login instead.
    settings = quick(fake_engine, tmp_path, app={"login_user": "ops", "login_password": "pw-77e1"})
    with LiveApp(settings) as live:
        anonymous = httpx.post(live.url + "/gradio_api/call/ocr", json={"data": [[], *RUN_INPUTS]}, timeout=30)
        assert anonymous.status_code in (401, 403)
        assert httpx.post(live.url + "/gradio_api/upload", files={"files": ("a.png", PNG)}, timeout=30).status_code \
            in (401, 403)
        wrong = httpx.post(live.url + "/login", data={"username": "ops", "password": "nope"}, timeout=30)
        assert wrong.status_code in (400, 401)
        session = httpx.post(live.url + "/login", data={"username": "ops", "password": "pw-77e1"}, timeout=30)
        assert session.status_code == 200
        path = httpx.post(live.url + "/gradio_api/upload", files={"files": ("a.png", PNG, "image/png")},
                          cookies=session.cookies, timeout=30).json()[0]
        kind, _ = gradio_run(live.url, file_data(path), cookies=session.cookies)
        assert kind == "complete" and len(fake_engine.requests) == 1
