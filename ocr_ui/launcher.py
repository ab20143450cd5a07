"""Bring up the engine (vLLM) and then the app; stop both when either dies or on Ctrl-C.

``python -m ocr_ui.launcher [--model PATH_OR_ID] [--external-vllm URL] [--device cpu|cuda|auto]
[--config PATH]`` (``./launch_vllm.sh`` runs it from the app's environment). Steps: pick the device
(a GPU that nvidia-smi lists, else the CPU build), check the model can be loaded here (a local folder,
a hub id already cached, or a reachable hub), build the engine's environment when missing, start vLLM
with the flags rendered from config, wait for its /health, start ``app.py`` pointed at it, then watch
both. Logs go to ``app.log_dir``. Only the process groups started here are ever signalled.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType

from ocr_ui import engine
from ocr_ui.config import Settings, load_config, process_environ
from ocr_ui.errors import ConfigError, OcrError

APP_START_TIMEOUT_S = 180.0
_TRUE = {"1", "true", "yes", "on"}


def detect_device(requested: str, *, which: Callable[[str], str | None] = shutil.which,
                  run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> str:
    """cuda when asked or when nvidia-smi lists a GPU; cpu otherwise."""
    if requested in ("cpu", "cuda"):
        return requested
    if which("nvidia-smi") is None:
        return "cpu"
    try:
        listed = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"
    return "cuda" if listed.returncode == 0 and "GPU" in listed.stdout else "cpu"


def _looks_local(path: str) -> bool:
    return path.startswith(("/", ".", "~")) or Path(path).expanduser().exists()


def hub_cache_has(model_id: str, environ: Mapping[str, str]) -> bool:
    """True when the Hugging Face cache already holds a snapshot of ``model_id``."""
    hub = environ.get("HF_HUB_CACHE") or str(
        Path(environ.get("HF_HOME") or Path(environ.get("HOME") or Path.home()) / ".cache" / "huggingface") / "hub")
    snapshots = Path(hub) / ("models--" + model_id.replace("/", "--")) / "snapshots"
    return any(snapshots.glob("*/config.json"))


def hub_reachable(model_id: str, environ: Mapping[str, str], timeout: float = 5.0) -> bool:
    """One small request to the hub's model API; any network failure counts as unreachable."""
    endpoint = (environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    try:
        with urllib.request.urlopen(f"{endpoint}/api/models/{model_id}", timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def check_model(path: str, environ: Mapping[str, str], *,
                reachable: Callable[[str, Mapping[str, str]], bool] = hub_reachable) -> None:
    """Raise ConfigError (one clear line) when the model cannot be loaded on this machine."""
    if _looks_local(path):
        if not (Path(path).expanduser() / "config.json").is_file():
            raise ConfigError(f"no checkpoint at {path}: the folder must hold config.json and the weights")
        return
    if hub_cache_has(path, environ):
        return
    offline = environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE
    if offline or not reachable(path, environ):
        why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub cannot be reached"
        raise ConfigError(f"model {path} cannot be downloaded here ({why}) and is not in the local cache; "
                          f"point at a local checkpoint: ./launch_vllm.sh --model /path/to/checkpoint")


def check_port_free(host: str, port: int) -> None:
    """Fail early, with advice, when something already listens on the engine's port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        if probe.connect_ex((host if host not in ("0.0.0.0", "") else "127.0.0.1", port)) == 0:
            raise ConfigError(f"port {port} is already in use (another engine?): stop it, choose another with "
                              f"OCR_UI__ENGINE__PORT, or reuse it with --external-vllm http://{host}:{port}/v1")


def engine_url(settings: Settings) -> str:
    """The OpenAI base URL of the engine this launcher starts."""
    host = settings.engine.host if settings.engine.host not in ("0.0.0.0", "") else "127.0.0.1"
    return f"http://{host}:{settings.engine.port}/v1"


def normalize_base_url(url: str) -> str:
    """Accept http://host:port or http://host:port/v1 for --external-vllm."""
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--external-vllm must be an http(s) URL such as http://127.0.0.1:8000/v1, not {url!r}")
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def overrides(args: argparse.Namespace) -> dict[str, str]:
    """Environment entries that carry the command line into config (and into the app)."""
    env: dict[str, str] = {}
    if args.config:
        env["OCR_UI_CONFIG"] = str(Path(args.config).resolve())
    if args.model:
        local = Path(args.model).expanduser()
        env["OCR_UI__MODEL__PATH"] = str(local.resolve()) if local.exists() else args.model
    if args.external_vllm:
        env["OCR_UI__ENGINE__BASE_URL"] = normalize_base_url(args.external_vllm)
    return env


def app_health_url(settings: Settings) -> str:
    host = settings.app.host if settings.app.host not in ("0.0.0.0", "") else "127.0.0.1"
    return f"http://{host}:{settings.app.port}{settings.app.root_path.rstrip('/')}/healthz"


def _say(message: str) -> None:
    print(f"launcher: {message}", flush=True)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGINT and SIGTERM take the same way out: stop both children


def _fail_with_tail(exc: OcrError) -> None:
    _say(f"error: {exc}")
    tail = getattr(exc, "log_tail", "")
    if tail:
        print(tail, file=sys.stderr, flush=True)


def run(args: argparse.Namespace, environ: dict[str, str]) -> int:
    """Everything after argument parsing; returns the exit status."""
    environ = {**environ, **overrides(args)}
    settings = load_config(None, environ)
    log_dir = Path(settings.app.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    app_path = engine.ROOT / "app.py"
    if not app_path.exists():
        raise ConfigError("app.py is missing from this checkout")
    eng: engine.EngineProcess | None = None
    app: engine.EngineProcess | None = None
    scratch: Path | None = None
    # Set both explicitly: a launcher started in the background inherits SIGINT as ignored.
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if not args.external_vllm:
            device = detect_device(args.device or settings.engine.device)
            check_model(settings.model.path, environ)
            check_port_free(settings.engine.host, settings.engine.port)
            venv = engine.venv_dir(settings, device, environ)
            if not engine.venv_ready(venv, device):
                dist, version = engine.ENGINE_RELEASES[device]
                _say(f"installing {dist} {version} into {venv} (once; a few minutes)")
            python = engine.ensure_venv(venv, device, env=environ)
            scratch = Path(tempfile.mkdtemp(prefix="ocr-engine-"))
            eng = engine.EngineProcess(engine.server_command(python, settings, device),
                                       engine.server_env(settings, device, environ, scratch), log_dir / "engine.log")
            _say(f"starting vLLM ({device}) for {settings.model.path}; log: {eng.log_path}")
            eng.start()
            waited = eng.wait_healthy(settings.engine.startup_timeout_s)
            _say(f"engine ready at {engine_url(settings)} after {waited:.1f} s")
            environ["OCR_UI__ENGINE__BASE_URL"] = engine_url(settings)
        app = engine.EngineProcess([sys.executable, str(app_path)], environ, log_dir / "app.log",
                                   health_url=app_health_url(settings), name="app")
        app.start()
        app.wait_healthy(APP_START_TIMEOUT_S)
        _say(f"app ready at http://{settings.app.host}:{settings.app.port}{settings.app.root_path} "
             f"(engine {environ.get('OCR_UI__ENGINE__BASE_URL', settings.engine.base_url)}); Ctrl-C stops both")
        while True:
            for proc in (eng, app):
                if proc is not None and not proc.alive():
                    _say(f"the {proc.name} exited with status {proc.returncode}; stopping; see {proc.log_path}")
                    print(proc.log_tail(20), file=sys.stderr, flush=True)
                    return 1
            time.sleep(0.5)
    except KeyboardInterrupt:
        _say("stopping")
        return 0
    except ConfigError:
        raise
    except OcrError as exc:
        _fail_with_tail(exc)
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the shutdown short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for proc in (app, eng):
            if proc is not None:
                proc.stop()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(prog="python -m ocr_ui.launcher", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="hub id or local checkpoint folder (default: model.path)")
    parser.add_argument("--external-vllm", default=None, metavar="URL",
                        help="use a vLLM server that is already running at URL; start no engine")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                        help="where the engine runs (default: engine.device, auto = GPU if nvidia-smi sees one)")
    parser.add_argument("--config", default=None, help="config file (default: $OCR_UI_CONFIG or config.yaml)")
    args = parser.parse_args(argv)
    try:
        return run(args, process_environ() if environ is None else environ)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
