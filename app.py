"""Entry point: ``python app.py`` serves the workbench (UI, /api/ocr, /healthz, /metrics) on app.host:app.port.

Everything is built from ``ocr_ui.config.load_from_process()``; a bad configuration exits with status 2
and one line naming the setting. The engine is expected at engine.base_url (start it with the launcher).
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from ocr_ui.admission import Admission
from ocr_ui.client import EngineClient
from ocr_ui.config import Settings, load_from_process
from ocr_ui.errors import ConfigError
from ocr_ui.metrics import Metrics
from ocr_ui.records import FailureRecorder
from ocr_ui.service import OcrService
from ocr_ui.ui import build_ui
from ocr_ui.web import build_app
from ocr_ui.web_api import RateLimiter

log = logging.getLogger("ocr_ui.app")


def private_upload_dir() -> str:
    """Point Gradio's upload cache at a folder of this process only (0700), removed when it exits.

    Gradio otherwise keeps uploads under the shared /tmp/gradio, readable by other local users' tools
    and left behind across restarts. It reads GRADIO_TEMP_DIR when the Blocks and its routes are built,
    so this runs before ``build_ui``; an operator's own GRADIO_TEMP_DIR is left as it is.
    """
    current = os.environ.get("GRADIO_TEMP_DIR")  # app.py is the entry point: it sets up the process
    if current:
        return current
    folder = tempfile.mkdtemp(prefix="ocr-ui-uploads-")  # mkdtemp creates it 0700
    os.environ["GRADIO_TEMP_DIR"] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def create_app(settings: Settings) -> FastAPI:
    """The whole app for ``settings``: metrics, engine client, admission, service, UI and routes."""
    private_upload_dir()
    metrics = Metrics(nvml=settings.metrics.nvml)
    client = EngineClient(settings, metrics=metrics)
    admission = Admission(settings, metrics=metrics) if settings.admission.enabled else None
    recorder = FailureRecorder(Path(settings.app.log_dir) / "failures.jsonl", keep_inputs=settings.app.keep_failed_inputs)
    service = OcrService(settings, client, metrics, admission, recorder=recorder)
    limiter = RateLimiter(settings.app.rate_limit_per_minute)  # one budget per client across UI and API
    demo = build_ui(service, settings, limiter=limiter)
    return build_app(settings, service, demo, metrics, limiter=limiter)


def share_link(settings: Settings, server: uvicorn.Server) -> None:
    """Open Gradio's public tunnel once the server listens (downloads frpc and needs internet)."""
    from gradio.networking import setup_tunnel  # only when asked for: it reaches out to Gradio's servers

    while not server.started and not server.should_exit:
        time.sleep(0.2)
    try:
        url = setup_tunnel(settings.app.host, settings.app.port, secrets.token_urlsafe(32), None, None)
    except Exception as exc:  # the thread's outermost boundary: the app keeps serving locally
        log.error("no share link (this host may be offline): %s", exc)
        return
    log.warning("public share link (anyone with it can use the app): %s", url)


def configure_logging(settings: Settings) -> None:
    """The app's log format and level; the HTTP client's per-call lines only at debug."""
    logging.basicConfig(level=settings.app.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx2 logs every engine call and every /metrics poll (once a second) at INFO: noise that buries
    # the app's own request lines under load.
    quiet = logging.DEBUG if settings.app.log_level == "debug" else logging.WARNING
    for name in ("httpx2", "httpcore2", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(quiet)


def main() -> int:
    try:
        settings = load_from_process()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings)
    app = create_app(settings)
    config = uvicorn.Config(app, host=settings.app.host, port=settings.app.port, log_level=settings.app.log_level,
                            root_path=settings.app.root_path, timeout_graceful_shutdown=10)
    server = uvicorn.Server(config)
    if settings.app.share:
        threading.Thread(target=share_link, args=(settings, server), name="share-tunnel", daemon=True).start()
    # uvicorn's "auto" takes uvloop and httptools when installed (requirements.txt) and falls back to
    # asyncio and h11 without a word: say which, since every open answer streams through this loop.
    loop, parser = (name if importlib.util.find_spec(name) else fallback
                    for name, fallback in (("uvloop", "asyncio"), ("httptools", "h11")))
    log.info("serving on http://%s:%d (event loop %s, HTTP parser %s)", settings.app.host, settings.app.port,
             loop, parser)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
