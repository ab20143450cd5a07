"""The FastAPI app: ``/healthz``, ``/metrics``, ``POST /api/ocr``, and the Gradio UI mounted at ``/``.

Routes are registered before Gradio is mounted at the root (a root mount swallows later routes). The
queue limits are applied to ``demo`` by ``ui.build_ui``; here Gradio only gets the upload cap, the
optional login and error display.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import gradio as gr
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ocr_ui.config import Settings
from ocr_ui.errors import OcrError
from ocr_ui.metrics import Metrics
from ocr_ui.service import OcrService
from ocr_ui.web_api import RateLimiter, api_router, error_body


def engine_state(health: Any) -> dict[str, str]:
    """``{status, detail}`` from whatever the service's health report looks like."""
    source = health.get("engine", health) if isinstance(health, dict) else health
    if isinstance(source, dict):
        return {"status": str(source.get("status", "down")), "detail": str(source.get("detail", ""))}
    return {"status": str(getattr(source, "status", "down")), "detail": str(getattr(source, "detail", ""))}


def build_app(settings: Settings, service: OcrService, demo: gr.Blocks, metrics: Metrics | None = None,
              *, limiter: RateLimiter | None = None) -> FastAPI:
    """The whole web app; ``demo`` must already have its queue configured."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # The service's helpers live as long as the server: admission samples the engine in the
        # background, the client holds a connection pool. Gradio chains its own startup into this.
        admission = getattr(service, "admission", None)
        if admission is not None and hasattr(admission, "start"):
            await admission.start()
        try:
            yield
        finally:
            if admission is not None and hasattr(admission, "stop"):
                await admission.stop()
            await service.client.close()

    app = FastAPI(title="OCR workbench", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    @app.exception_handler(OcrError)
    async def ocr_error(_request: Request, exc: OcrError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.http_status == 401 else None
        return JSONResponse(error_body(exc), status_code=exc.http_status, headers=headers)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        report = await service.health()
        engine = engine_state(report)
        body: dict[str, Any] = {"app": "ok", "engine": engine}
        if isinstance(report, dict) and "slots" in report:
            body["slots"] = report["slots"]
        return JSONResponse(body, status_code=200 if engine["status"] == "up" else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        if metrics is None or not settings.metrics.enabled:
            return Response("metrics are turned off\n", status_code=404, media_type="text/plain")
        text, content_type = metrics.render()
        return Response(text, headers={"Content-Type": content_type})

    app.include_router(api_router(settings, service, limiter=limiter))

    auth = None
    if settings.app.login_user and settings.app.login_password:
        auth = (settings.app.login_user, settings.app.login_password.get_secret_value())
    return gr.mount_gradio_app(
        app, demo, path="/",
        auth=auth,
        auth_message="Sign in to use the OCR workbench." if auth else None,
        root_path=settings.app.root_path or None,
        show_error=False,  # OcrErrors reach users as gr.Error (always shown); other exceptions' text may hold paths
        max_file_size=int(settings.app.max_upload_mb * 1024 * 1024),
        run_history=settings.app.run_history,
        enable_monitoring=False,  # /metrics is ours; Gradio's /monitoring page would be a second, keyed one
        footer_links=["api", "settings"],
        ssr_mode=False,  # no Node server: one process, one port
        app_kwargs={"docs_url": None, "redoc_url": None, "openapi_url": None},  # Gradio's sub-app: no schema pages either
    )
