"""The Run handler of the UI: files -> OcrService -> the result panes, yielded as the text streams in.

The handler is an async generator, so Gradio's Stop (``cancels=[run_event]``) or a closed browser tab
closes it at its next ``yield``; ``aclosing`` then closes the service's generator, which closes the
engine stream, which makes vLLM abort the request. Pages already finished stay on screen.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from ocr_ui.config import Settings
from ocr_ui.errors import FileTooLarge, InputError, OcrError, RateLimited
from ocr_ui.i18n import LANGUAGES, t
from ocr_ui.preprocess import open_document, render_page
from ocr_ui.profiles import get_profile
from ocr_ui.prompts import TaskOptions, build_prompt, get_preset
from ocr_ui.service import OcrService
from ocr_ui.ui_job import UiJob
from ocr_ui.ui_render import progress_html

MB = 1024 * 1024
PREVIEW_SIDE = 1024  # pages are previewed (and boxes drawn) at this size; boxes are relative, so any size fits


@dataclass(frozen=True)
class Inputs:
    """What the user set, in the order of the Run event's inputs."""

    files: Any
    preset: str
    fields: str
    target_language: str
    question: str
    language_hint: str
    pages: str
    prompt: str
    max_tokens: float | None
    lang: str


def upload_paths(files: Any) -> list[str]:
    """The uploaded files' temp paths (gr.File gives a str, a list of str, or file dicts from the API)."""
    if not files:
        return []
    items = files if isinstance(files, list | tuple) else [files]
    paths = []
    for item in items:
        path = item.get("path") if isinstance(item, dict) else getattr(item, "path", item)
        if path:
            paths.append(str(path))
    return paths


def read_upload(path: str, limit_mb: float) -> bytes:
    """The file's bytes; the size is checked before it is read whole."""
    size = Path(path).stat().st_size
    if size > limit_mb * MB:
        raise FileTooLarge(f"The file is {size / MB:.1f} MB; at most {limit_mb:g} MB is accepted.")
    return Path(path).read_bytes()


def split_fields(text: str) -> tuple[str, ...]:
    """Field names typed with commas (also Chinese ones) or one per line."""
    for sep in ("，", "、", "\n", ";", "；"):
        text = text.replace(sep, ",")
    return tuple(f.strip() for f in text.split(",") if f.strip())


class RunHandler:
    """Holds the service and settings; ``run`` is the Gradio event function."""

    def __init__(self, service: OcrService, settings: Settings, *, limiter: Any = None) -> None:
        self.service = service
        self.settings = settings
        self.profile = get_profile(settings.model.profile)
        self.limiter = limiter
        self._folders: deque[tuple[float, Path]] = deque()  # download folders, removed after an hour
        self._live: dict[str, UiJob] = {}  # session -> the run on its screen, for Stop to report on

    def options(self, inp: Inputs, auto_prompt: str) -> TaskOptions:
        """Task options; the prompt box counts as an override only when the user changed it."""
        edited = inp.prompt.strip() and inp.prompt.strip() != (auto_prompt or "").strip()
        return TaskOptions(fields=split_fields(inp.fields or ""), target_language=inp.target_language or "English",
                           question=inp.question or "", language_hint=inp.language_hint or "",
                           prompt_override=inp.prompt if edited else "")

    def auto_prompt(self, preset_key: str, fields: str, target: str, question: str, hint: str) -> str:
        """The exact prompt the task would send now; the bare template while options are still missing."""
        preset = get_preset(self.profile.name, preset_key)
        options = TaskOptions(fields=split_fields(fields or ""), target_language=target or "English",
                              question=question or "", language_hint=hint or "")
        try:
            return build_prompt(self.profile, preset, options, max_prompt_chars=self.settings.generation.max_prompt_chars,
                                max_fields=self.settings.generation.max_fields)
        except InputError:
            return preset.template

    def preview(self, files: Any) -> list[tuple[Image.Image, str]]:
        """First page of each upload, small, for the gallery; unreadable files are left out (Run says why)."""
        out = []
        for path in upload_paths(files)[:12]:
            try:
                data = read_upload(path, self.settings.app.max_upload_mb)
                doc = open_document(data, self.settings.images, pages=None)
                page = render_page(data, doc, doc.selected[0], self.settings.images, self.profile,
                                   budget_tokens=1_000_000, max_side=512)
            except OcrError:
                continue
            suffix = f" · {doc.page_count} p." if doc.page_count > 1 else ""
            out.append((page.image, Path(path).name + suffix))
        return out

    def _page_image(self, data: bytes, pages: str | None, number: int) -> Image.Image | None:
        try:
            doc = open_document(data, self.settings.images, pages=pages)
            page = render_page(data, doc, number, self.settings.images, self.profile,
                               budget_tokens=1_000_000, max_side=PREVIEW_SIDE)
        except OcrError:
            return None
        # The page was fitted to multiples of 32 for the model; show it in the original's proportions
        # (boxes are fractions of the page, so they land on the same text either way).
        scale = min(1.0, PREVIEW_SIDE / max(page.source_width, page.source_height))
        size = (max(1, round(page.source_width * scale)), max(1, round(page.source_height * scale)))
        return page.image if page.image.size == size else page.image.resize(size, Image.Resampling.LANCZOS)

    def _download_folder(self) -> Path:
        now = time.monotonic()
        while self._folders and now - self._folders[0][0] > 3600:
            shutil.rmtree(self._folders.popleft()[1], ignore_errors=True)
        folder = Path(tempfile.mkdtemp(prefix="ocr-result-"))  # one per run: users never share names
        self._folders.append((now, folder))
        return folder

    async def run(self, inp: Inputs, auto_prompt: str, request: gr.Request | None
                  ) -> AsyncGenerator[tuple[Any, ...], None]:
        """The Run event: yields the result panes' values as pages stream in (see ``UiJob.panes``)."""
        lang = inp.lang if inp.lang in LANGUAGES else "en"
        paths = upload_paths(inp.files)
        if not paths:
            raise gr.Error(t(lang, "msg_no_file"))
        try:
            if self.limiter is not None:
                host = request.client.host if request is not None and request.client else "unknown"
                self.limiter.check(f"ip:{host}")
            preset = get_preset(self.profile.name, inp.preset)
            options = self.options(inp, auto_prompt)
            prompt = build_prompt(self.profile, preset, options, max_prompt_chars=self.settings.generation.max_prompt_chars,
                                  max_fields=self.settings.generation.max_fields)
        except (InputError, RateLimited) as exc:
            raise gr.Error(str(exc)) from exc
        job = UiJob(service=self.service, preset=preset, prompt=prompt, options=options,
                    pages=(inp.pages or "").strip() or None, max_tokens=int(inp.max_tokens) if inp.max_tokens else None,
                    lang=lang, read=lambda path: read_upload(path, self.settings.app.max_upload_mb),
                    page_image=self._page_image, download_folder=self._download_folder,
                    flush_s=self.settings.app.stream_flush_s)
        session = getattr(request, "session_hash", None) or ""
        self._live[session] = job
        try:
            async with aclosing(job.run(paths)) as panes:
                async for values in panes:
                    yield values
        finally:
            if self._live.get(session) is job:
                del self._live[session]
        yield job.panes(final=True, history=job.history_entry())

    def stop(self, lang: str, request: gr.Request) -> tuple[str, str]:
        """The Stop button's own answer (Gradio cancels the run itself): unfinished pages show 'stopped'."""
        lang = lang if lang in LANGUAGES else "en"
        job = self._live.get(getattr(request, "session_hash", None) or "")
        if job is None:
            return progress_html(lang, []), t(lang, "msg_stopped")
        job.stopped = True  # a redraw that slips in before the cancel lands shows 'stopped' too
        return progress_html(lang, job.shown_views()), t(lang, "msg_stopped")
