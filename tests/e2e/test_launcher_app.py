"""The launcher in front of the real engine (--external-vllm): it brings the app up pointed at the
engine, stops it on Ctrl-C, and stops when the app dies. (Starting vLLM itself is what the session
fixture does through the same ocr_ui.engine supervisor.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import ROOT, Server, free_port

pytestmark = pytest.mark.e2e
APP_START_TIMEOUT_S = 180.0


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def launched(vllm_server: Server, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = free_port()
    env = {**os.environ, "OCR_UI__APP__PORT": str(port), "OCR_UI__APP__LOG_DIR": str(tmp_path / "logs"),
           "OCR_UI__MODEL__SERVED_NAME": vllm_server.settings.model.served_name}
    proc = subprocess.Popen([sys.executable, "-m", "ocr_ui.launcher", "--external-vllm", vllm_server.root_url],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + APP_START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if _get(f"http://127.0.0.1:{port}/healthz")[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.5)
    try:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        yield proc, port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        if proc.stdout:
            proc.stdout.close()


def _app_pid(launcher: subprocess.Popen[str]) -> int:
    (child,) = psutil.Process(launcher.pid).children()
    return int(child.pid)


def test_launcher_brings_the_app_up_against_the_engine_and_ctrl_c_stops_it(launched: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = launched
    status, body = _get(f"http://127.0.0.1:{port}/healthz")
    assert status == 200 and json.loads(body)["engine"]["status"] == "up"
    app = _app_pid(proc)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    assert not psutil.pid_exists(app) or psutil.Process(app).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(OSError):
        _get(f"http://127.0.0.1:{port}/healthz")


def test_launcher_stops_when_the_app_dies(launched: tuple[subprocess.Popen[str], int]) -> None:
    proc, _ = launched
    os.kill(_app_pid(proc), signal.SIGKILL)
    assert proc.wait(timeout=60) == 1
    assert proc.stdout is not None and "the app exited" in proc.stdout.read()
