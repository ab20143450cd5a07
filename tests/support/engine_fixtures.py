"""One real vLLM server (CPU build) on a tiny random HunyuanOCR-shaped checkpoint for the whole test run.

A pytest plugin (``tests/conftest.py`` names it in ``pytest_plugins``), so the e2e and the browser tests
share the same session-scoped fixtures and one test session never starts a second engine.

The engine's virtual environment comes from ``OCR_UI_ENGINE_PYTHON`` (``scripts/test.sh`` sets it after
installing the engine) or, failing that, from the default location when it is already built. Without
either the e2e tests are skipped with a note saying how to install the engine. The server is started
through ``ocr_ui.engine`` (the launcher's own supervisor) and always stopped by its PID at the end.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ocr_ui import engine
from ocr_ui.config import Settings, load_config

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 300.0  # ~30 s here; a freshly installed venv compiles .pyc files on its first start
IN_FLIGHT_LIMIT = 2        # client.max_in_flight for the e2e settings (the engine runs up to 4)


def _engine_python() -> Path | None:
    given = os.environ.get("OCR_UI_ENGINE_PYTHON")
    if given:
        if not Path(given).exists():
            pytest.fail(f"OCR_UI_ENGINE_PYTHON={given} does not exist")
        return Path(given)
    settings = load_config(None, {})
    venv = engine.venv_dir(settings, "cpu", dict(os.environ))
    return venv / "bin" / "python" if engine.venv_ready(venv, "cpu") else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def e2e_settings(model_dir: Path, port: int, **overrides: str) -> Settings:
    """Settings for the tiny engine: a small KV cache and short client timeouts."""
    env = {
        "OCR_UI__MODEL__PATH": str(model_dir),
        "OCR_UI__ENGINE__PORT": str(port),
        "OCR_UI__ENGINE__BASE_URL": f"http://127.0.0.1:{port}/v1",
        "OCR_UI__ENGINE__MAX_NUM_SEQS": "4",
        "OCR_UI__ENGINE__MAX_MODEL_LEN": "20000",  # room for a request long enough to be stopped midway
        "OCR_UI__ENGINE__MAX_NUM_BATCHED_TOKENS": "4096",
        "OCR_UI__ENGINE__CPU_KV_CACHE_GB": "1",
        "OCR_UI__CLIENT__MAX_IN_FLIGHT": str(IN_FLIGHT_LIMIT),
        "OCR_UI__CLIENT__IDLE_TIMEOUT_S": "60",
        # The CPU engine shares two cores with the tests: its API server may take seconds to accept.
        "OCR_UI__CLIENT__CONNECT_TIMEOUT_S": "30",
        "OCR_UI__CLIENT__TOTAL_TIMEOUT_S": "120",
        "OCR_UI__CLIENT__MAX_RETRIES": "0",
        "OCR_UI__ADMISSION__ENABLED": "false",
        "OCR_UI__GENERATION__MAX_TOKENS_CAP": "16000",
        **{f"OCR_UI__{k.upper()}": v for k, v in overrides.items()},
    }
    return load_config(None, env)


@dataclass
class Server:
    """The running engine and how to reach it; ``restart`` brings it back on the same port."""

    python: Path
    settings: Settings
    log_path: Path
    scratch: Path
    process: engine.EngineProcess = field(init=False)

    @property
    def base_url(self) -> str:
        return self.settings.engine.base_url

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")

    def start(self) -> float:
        argv = engine.server_command(self.python, self.settings, "cpu")
        env = engine.server_env(self.settings, "cpu", dict(os.environ), self.scratch)
        self.process = engine.EngineProcess(argv, env, self.log_path).start()
        try:
            return self.process.wait_healthy(STARTUP_TIMEOUT_S)
        except Exception:
            self.process.stop()
            raise

    def restart(self) -> float:
        self.process.stop()
        return self.start()


@pytest.fixture(scope="session")
def engine_python() -> Path:
    python = _engine_python()
    if python is None:
        pytest.skip("the CPU engine is not installed: run ./scripts/test.sh, or "
                    "scripts/install_engine.sh ~/.cache/ocr-workbench/engine-cpu-0.28.0 cpu")
    return python


@pytest.fixture(scope="session")
def tiny_checkpoint(engine_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-hunyuanocr")
    done = subprocess.run([str(engine_python), "-m", "ocr_ui.tiny_checkpoint", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def vllm_server(engine_python: Path, tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("engine")
    server = Server(engine_python, e2e_settings(tiny_checkpoint, free_port()), work / "engine.log", work / "scratch")
    try:
        waited = server.start()
    except Exception:
        sys.stderr.write(f"--- engine log tail ---\n{server.process.log_tail(60)}\n")
        raise
    sys.stderr.write(f"\n[e2e] vLLM ready after {waited:.1f} s (pid {server.process.pid})\n")
    try:
        yield server
    finally:
        server.process.stop()
