"""Side by side: two presets, or one preset with two wordings of its prompt, on the same first page.

Both requests go through ``OcrService.run`` at the same time; their updates are merged into one stream
of (status, answer A, answer B), so both raw answers grow on screen together. Stop (or a closed tab)
closes the merged generator, which cancels both pumps, which closes both engine streams.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import gradio as gr

from ocr_ui.errors import InputError, OcrError, RateLimited
from ocr_ui.i18n import LANGUAGES, t
from ocr_ui.prompts import TaskOptions, build_prompt, get_preset
from ocr_ui.service import OcrRequest, PageResult
from ocr_ui.ui_labels import Labeller
from ocr_ui.ui_run import RunHandler, read_upload, split_fields, upload_paths

SIDES = ("a", "b")
YIELD_EVERY_S = 0.05


class CompareHandler:
    """The Compare area's Run event; reuses the Run handler's service, settings and rate limiter."""

    def __init__(self, handler: RunHandler) -> None:
        self.handler = handler

    def options(self, key: str, prompt: str, fields: str, target: str, question: str, hint: str) -> TaskOptions:
        """The main form's options; the side's prompt is an override only when it differs from the task's own."""
        auto = self.handler.auto_prompt(key, fields, target, question, hint)
        edited = prompt.strip() and prompt.strip() != auto.strip()
        return TaskOptions(fields=split_fields(fields or ""), target_language=target or "English",
                           question=question or "", language_hint=hint or "",
                           prompt_override=prompt if edited else "")

    async def run(self, files: Any, fields: str, target: str, question: str, hint: str, max_tokens: float | None,
                  lang: str, preset_a: str, prompt_a: str, preset_b: str, prompt_b: str,
                  request: gr.Request | None = None) -> AsyncGenerator[tuple[str, str, str], None]:
        """Yields (status, answer A, answer B) while both answers stream in."""
        lang = lang if lang in LANGUAGES else "en"
        paths = upload_paths(files)
        if not paths:
            raise gr.Error(t(lang, "msg_no_file"))
        settings = self.handler.settings
        requests = []
        try:
            if self.handler.limiter is not None:
                host = request.client.host if request is not None and request.client else "unknown"
                self.handler.limiter.check(f"ip:{host}")
            data = read_upload(paths[0], settings.app.max_upload_mb)
            for key, prompt in ((preset_a, prompt_a), (preset_b, prompt_b)):
                preset = get_preset(self.handler.profile.name, key)
                options = self.options(key, prompt or "", fields, target, question, hint)
                build_prompt(self.handler.profile, preset, options, max_prompt_chars=settings.generation.max_prompt_chars,
                             max_fields=settings.generation.max_fields)  # a bad option is refused before either runs
                requests.append(OcrRequest(data=data, preset=key, options=options, pages="1",
                                           max_tokens=int(max_tokens) if max_tokens else None, filename=Path(paths[0]).name))
        except (InputError, RateLimited) as exc:
            raise gr.Error(str(exc)) from exc
        pages: dict[str, PageResult | str] = {}
        last = 0.0
        async with aclosing(self._merged(requests)) as updates:
            async for side, value in updates:
                pages[side] = value
                now = time.monotonic()
                finished = isinstance(value, str) or value.status != "running"
                if finished or now - last >= YIELD_EVERY_S:
                    last = now
                    yield self._panes(lang, pages)
        yield self._panes(lang, pages, final=True)

    async def _merged(self, requests: list[OcrRequest]) -> AsyncGenerator[tuple[str, PageResult | str], None]:
        """(side, page result or error text) from both requests as they come; closing cancels both."""
        queue: asyncio.Queue[tuple[str, PageResult | str | None]] = asyncio.Queue()

        async def pump(side: str, req: OcrRequest) -> None:
            try:
                async with aclosing(self.handler.service.run(req)) as updates:
                    async for update in updates:
                        if update.pages:
                            await queue.put((side, update.pages[0]))
            except OcrError as exc:
                await queue.put((side, str(exc)))
            finally:
                queue.put_nowait((side, None))

        tasks = [asyncio.create_task(pump(side, req)) for side, req in zip(SIDES, requests, strict=True)]
        try:
            running = len(tasks)
            while running:
                side, value = await queue.get()
                if value is None:
                    running -= 1
                else:
                    yield side, value
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    def _panes(lang: str, pages: dict[str, PageResult | str], *, final: bool = False) -> tuple[str, str, str]:
        parts, texts = [], []
        for side in SIDES:
            value = pages.get(side)
            name = t(lang, f"compare_{side}")
            if isinstance(value, str):
                parts.append(f"{name}: {t(lang, 'status_failed')} ({value})")
                texts.append("")
                continue
            status = value.status if value is not None else ("stopped" if final else "queued")
            detail = f" ({value.error})" if value is not None and value.error else ""
            parts.append(f"{name}: {t(lang, f'status_{status}')}{detail}")
            texts.append(value.text if value is not None else "")
        return " · ".join(parts), texts[0], texts[1]


def add_compare(labels: Labeller, handler: RunHandler, lang0: str, *, files: Any, fields: Any, target: Any,
                question: Any, hint: Any, max_tokens: Any, lang_switch: Any, concurrency: int) -> Any:
    """The Compare area (call inside the Blocks); returns its Run event so other buttons can cancel it."""
    compare = CompareHandler(handler)
    keys = list(labels.presets)
    boxes: dict[str, tuple[Any, Any, Any]] = {}
    with gr.Accordion(t(lang0, "compare"), open=False, elem_id="ocr-compare") as area:
        labels.add(gr.Markdown(t(lang0, "compare_info")), value="compare_info")
        with gr.Row():
            for side, key in zip(SIDES, (keys[0], keys[min(1, len(keys) - 1)]), strict=True):
                with gr.Column(min_width=320):
                    preset = labels.add(gr.Dropdown(labels.preset_choices(), value=key, label=t(lang0, f"compare_{side}"),
                                                    elem_id=f"ocr-cmp-preset-{side}"), label=f"compare_{side}")
                    prompt = labels.add(gr.Textbox(handler.auto_prompt(key, "", "English", "", ""), lines=3,
                                                   label=t(lang0, "prompt"), elem_id=f"ocr-cmp-prompt-{side}"),
                                        label="prompt")
                    answer = labels.add(gr.Textbox(label=t(lang0, "compare_answer"), lines=12, max_lines=30,
                                                   interactive=False, buttons=["copy"], elem_id=f"ocr-cmp-raw-{side}"),
                                        label="compare_answer")
                    boxes[side] = (preset, prompt, answer)
        with gr.Row():
            run_btn = labels.add(gr.Button(t(lang0, "compare_run"), variant="primary", elem_id="ocr-cmp-run"),
                                 value="compare_run")
            stop_btn = labels.add(gr.Button(t(lang0, "stop"), variant="stop", elem_id="ocr-cmp-stop"), value="stop")
        status = gr.Markdown("", elem_id="ocr-cmp-status")
    labels.add(area, label="compare")

    options = [fields, target, question, hint]
    for preset, prompt, _ in boxes.values():
        for source in (preset, *options):  # the side's prompt follows its task and the main form's options
            source.change(lambda k, f, tg, q, h: handler.auto_prompt(k, f, tg, q, h), [preset, *options], prompt,
                          queue=False, api_visibility="private")
    (pa, qa, ra), (pb, qb, rb) = boxes["a"], boxes["b"]
    event = run_btn.click(compare.run, [files, *options, max_tokens, lang_switch, pa, qa, pb, qb], [status, ra, rb],
                          api_visibility="private", concurrency_limit=concurrency, concurrency_id="engine",
                          show_progress="minimal")
    stop_btn.click(lambda lang: t(lang if lang in LANGUAGES else "en", "msg_stopped"), lang_switch, status,
                   cancels=[event], queue=False, api_visibility="private")
    return event
