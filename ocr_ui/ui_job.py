"""One click of Run: the files go through the service one after another, and every update becomes the
tuple of values for the result panes (progress, notice, rendered, raw, JSON, boxes, table, downloads,
history). Outputs that did not change are ``gr.skip()`` so the browser only redraws what moved.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from ocr_ui.errors import InputError, OcrError
from ocr_ui.i18n import t
from ocr_ui.postprocess import extract_json, parse_spotting
from ocr_ui.prompts import Preset, TaskOptions
from ocr_ui.service import OcrRequest, OcrService
from ocr_ui.ui_render import FileView, box_rows, draw_boxes, progress_html, raw_text, result_markdown, write_downloads

YIELD_EVERY_S = 0.05  # default of app.stream_flush_s: redraw at most this often while text streams
HISTORY_LIMIT = 20
HISTORY_TEXT_CHARS = 20_000
FINISHED = ("done", "failed", "stopped")


class UiJob:
    """The state of one run as the user sees it; ``views`` is shared with the Stop handler."""

    def __init__(self, *, service: OcrService, preset: Preset, prompt: str, options: TaskOptions, pages: str | None,
                 max_tokens: int | None, lang: str, read: Callable[[str], bytes],
                 page_image: Callable[[bytes, str | None, int], Image.Image | None],
                 download_folder: Callable[[], Path], flush_s: float = YIELD_EVERY_S) -> None:
        self.service, self.preset, self.prompt, self.options = service, preset, prompt, options
        self.flush_s = flush_s  # every redraw re-sends whole components: status changes and first text at once
        self.pages, self.max_tokens, self.lang = pages, max_tokens, lang
        self._read, self._page_image, self._download_folder = read, page_image, download_folder
        self.views: list[FileView] = []
        self.notices: list[str] = []
        self._sizes: dict[tuple[int, int], tuple[int, int]] = {}
        self._markdown_cache: dict[tuple[int, int, int], str] = {}
        self._image: Image.Image | None = None  # the page shown in the Boxes tab, boxes drawn
        self._page: Image.Image | None = None  # ...and the same page clean
        self._image_key: tuple[int, int] | None = None
        self._box_count = -1
        self._downloads_for = ""  # statuses the download files were last written for
        self.stopped = False  # set by the Stop button; Gradio's cancel may land a moment later

    # ------------------------------------------------------------------ the run

    async def run(self, paths: list[str]) -> AsyncGenerator[tuple[Any, ...], None]:
        """Every file in turn; a refused file is noted (or, when it is the only one, raised as gr.Error)."""
        last_yield, last_statuses = 0.0, ""
        for index, path in enumerate(paths):
            name = Path(path).name  # the user's own file name (Gradio keeps it); the folder is never shown
            view = FileView(name)
            try:
                data = self._read(path)
                req = OcrRequest(data=data, preset=self.preset.key, options=self.options, pages=self.pages,
                                 max_tokens=self.max_tokens, filename=name)
                updates = self.service.run(req)
                update = await anext(updates)  # bad input (unreadable file, page range) is raised here
            except InputError as exc:
                if len(paths) == 1:
                    raise gr.Error(str(exc)) from exc
                view.error = str(exc)
                self.views.append(view)
                self.notices.append(f"{name}: {exc}")
                yield self.panes()
                continue
            self.views.append(view)
            async with aclosing(updates):  # closing this run closes the service's, then the engine stream
                while not self.stopped:
                    view.pages = list(update.pages)
                    # A page's first text counts as a change of state, so it is drawn at once.
                    statuses = "|".join(f"{p.status}{bool(p.text):d}" for v in self.views for p in v.pages)
                    now = time.monotonic()
                    if statuses != last_statuses or now - last_yield >= self.flush_s or update.done:
                        last_yield, last_statuses = now, statuses
                        self._note(index, view)  # notes and boxes only for a redraw: not once per chunk
                        if self.preset.output == "spotting":
                            await self._update_boxes(data, index, view)
                        yield self.panes()
                    try:
                        update = await anext(updates)
                    except StopAsyncIteration:
                        break
                    except OcrError as exc:  # the service marks pages failed itself; this is the backstop
                        self.notices.append(str(exc))
                        break
                self._note(index, view)  # the last update may not have been drawn
                if self.preset.output == "spotting" and not self.stopped:
                    await self._update_boxes(data, index, view)
            if self.stopped:
                self.notices.append(t(self.lang, "msg_stopped"))
                return
        done = sum(1 for v in self.views for p in v.pages if p.status == "done")
        self.notices.append(t(self.lang, "msg_done", n=done))

    def _note(self, index: int, view: FileView) -> None:
        for page in view.pages:
            if page.status == "failed" and page.error:
                self.notices.append(t(self.lang, "msg_page_failed", i=page.number, error=page.error))
            if page.trimmed:
                self.notices.append(t(self.lang, "msg_trimmed", i=page.number))
            if page.degraded:
                self.notices.append(t(self.lang, "msg_degraded", i=page.number))
            if page.source_width:
                self._sizes[(index, page.number)] = (page.source_width, page.source_height)

    async def _update_boxes(self, data: bytes, index: int, view: FileView) -> None:
        """Redraw the running (else the last finished) page with its boxes when their number changed."""
        active = next((p for p in view.pages if p.status == "running"), None)
        active = active or next((p for p in reversed(view.pages) if p.status in FINISHED), None)
        if active is None:
            return
        if self._image_key != (index, active.number):
            self._page = await asyncio.to_thread(self._page_image, data, self.pages, active.number)
            self._image_key, self._box_count = (index, active.number), -1
        boxes = parse_spotting(active.text) if active.text else []
        if self._page is not None and len(boxes) != self._box_count:
            self._image, self._box_count = draw_boxes(self._page, boxes), len(boxes)

    # ------------------------------------------------------------------ what the panes show

    def shown_views(self) -> list[FileView]:
        """The views as the user should see them: after Stop, unfinished pages read 'stopped'."""
        if not self.stopped:
            return self.views
        return [FileView(v.name, [replace(p, status="stopped") if p.status in ("queued", "running") else p
                                  for p in v.pages], v.error) for v in self.views]

    def panes(self, *, final: bool = False, history: Any = None) -> tuple[Any, ...]:
        """(progress, notice, rendered, raw, json, boxes image, boxes table, downloads, history entry)."""
        output = self.preset.output
        spotting = output == "spotting"
        boxes_image = self._image if spotting and self._image is not None else gr.skip()
        table = box_rows(self.views, self._sizes) if spotting else gr.skip()
        json_value = self.json_value(warn=final) if output == "json" else gr.skip()
        return (progress_html(self.lang, self.shown_views()), self.notice(),
                result_markdown(self.lang, self.views, output, self._markdown_cache), raw_text(self.views),
                json_value, boxes_image, table, self._downloads(final), history if history is not None else gr.skip())

    def notice(self) -> str:
        return "\n".join(f"- {n}" for n in dict.fromkeys(self.notices))

    def _downloads(self, final: bool) -> Any:
        """Files of the pages finished so far, rewritten only when a page finished (Stop keeps them)."""
        finished = "|".join(f"{p.number}:{p.status}" for v in self.views for p in v.pages if p.status in FINISHED)
        if not self.views or not finished or (finished == self._downloads_for and not final):
            return gr.skip()
        self._downloads_for = finished
        paths = write_downloads(self._download_folder(), self.lang, self.views, preset=self.preset.key,
                                prompt=self.prompt, output=self.preset.output)
        return gr.update(value=paths, visible=True)

    def json_value(self, *, warn: bool) -> Any:
        """Parsed JSON (one page: the value itself); a page that is not JSON shows its raw text and a warning."""
        values: dict[str, Any] = {}
        many = len(self.views) > 1 or any(len(v.pages) > 1 for v in self.views)
        for view in self.views:
            for page in view.pages:
                if page.status != "done":
                    continue
                value, warning = extract_json(page.text)
                key = f"{view.name} p{page.number}" if many else ""
                invalid = t(self.lang, "msg_invalid_json")
                values[key] = value if value is not None else {"warning": invalid, "raw": page.text}
                if warn and warning:
                    self.notices.append(invalid if value is None else warning)
        if list(values) == [""]:
            return values[""]
        return values or None

    def history_entry(self) -> dict[str, Any]:
        """This run for the browser's history (text capped so localStorage stays small)."""
        return {"when": datetime.now().strftime("%Y-%m-%d %H:%M"), "file": ", ".join(v.name for v in self.views)[:120],
                "task": self.preset.key, "text": raw_text(self.views)[:HISTORY_TEXT_CHARS]}
