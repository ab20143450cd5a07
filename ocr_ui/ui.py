"""The Gradio workbench: upload, pick a task, watch the text stream in, stop, download.

``build_ui(service, settings)`` lays the page out and wires the events; the Run handler lives in
``ui_run`` and the result panes' content in ``ui_render``. The Run event is the public API endpoint
``/ocr`` and shares the "engine" concurrency pool; the queue's ``max_size`` turns overload into
Gradio's own "busy, try again" answer instead of an endless wait.
"""

from __future__ import annotations

import hashlib
import secrets
from contextlib import aclosing
from pathlib import Path
from typing import Any

import gradio as gr

from ocr_ui.config import Settings
from ocr_ui.i18n import LANGUAGE_NAMES, pick_language, t
from ocr_ui.render import latex_delimiters
from ocr_ui.service import OcrService
from ocr_ui.ui_compare import add_compare
from ocr_ui.ui_job import HISTORY_LIMIT
from ocr_ui.ui_labels import Labeller
from ocr_ui.ui_render import page_markdown
from ocr_ui.ui_run import Inputs, RunHandler
from ocr_ui.ui_uploads import accept_uploads_only

FILE_TYPES = [".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".pdf"]
HISTORY_KEY = "ocr_ui_history_v1"


PROGRESS_CSS = """
.ocr-overall { display: flex; align-items: center; gap: .6em; }
.ocr-overall progress { flex: 1; height: .8em; }
.ocr-current { font-weight: 600; margin: .3em 0; }
.ocr-chips { display: flex; flex-wrap: wrap; gap: .3em; list-style: none; padding: 0; margin: .4em 0; }
.ocr-chip { min-width: 2.2em; padding: .1em .4em; border-radius: .4em; text-align: center; font-size: .85em;
            border: 1px solid #bbb; background: #f4f4f5; color: #111; }
.ocr-chip-status { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
.ocr-chip.st-running { background: #dbeafe; border-color: #2563eb; }
.ocr-chip.st-done { background: #dcfce7; border-color: #16a34a; }
.ocr-chip.st-failed { background: #fee2e2; border-color: #dc2626; }
.ocr-chip.st-stopped { background: #fef9c3; border-color: #ca8a04; }
.ocr-file { font-weight: 600; margin-top: .4em; }
.ocr-file-error { color: #b91c1c; }
"""


def history_secret(settings: Settings) -> str:
    """The BrowserState key: random once per install, kept in the log folder (else derived from the install)."""
    path = Path(settings.app.log_dir) / "browser_state.key"
    try:
        if path.exists():
            return path.read_text(encoding="utf-8").strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        value = secrets.token_hex(32)
        path.write_text(value, encoding="utf-8")
        path.chmod(0o600)
        return value
    except OSError:
        # A read-only install still gets a stable key, so history survives restarts.
        return hashlib.sha256(f"ocr-ui|{Path(__file__).resolve().parent}".encode()).hexdigest()


def build_ui(service: OcrService, settings: Settings, *, limiter: Any = None) -> gr.Blocks:
    """The workbench as a ``gr.Blocks`` with its queue configured."""
    handler = RunHandler(service, settings, limiter=limiter)
    profile_name = settings.model.profile
    lang0 = settings.app.ui_language if settings.app.ui_language != "auto" else "en"
    labels = Labeller(profile_name, lang0)
    presets = labels.presets
    first = next(iter(presets.values()))
    app = settings.app

    # Uploads stay in Gradio's cache while the page may run them again; an hour after upload (checked
    # every 15 minutes) and at shutdown Gradio deletes them, so documents do not pile up on the server.
    with gr.Blocks(title="OCR workbench", analytics_enabled=False, fill_width=True,
                   delete_cache=(900, 3600)) as demo:
        with gr.Row(equal_height=True):
            labels.add(gr.Markdown(t(lang0, "title")), value="title")
            engine_md = gr.Markdown("", elem_id="ocr-engine")
            lang_switch = labels.add(gr.Radio(
                [(name, code) for code, name in LANGUAGE_NAMES.items()], value=lang0, label=t(lang0, "ui_language"),
                elem_id="ocr-lang", scale=0, min_width=260), label="ui_language")
        labels.add(gr.Markdown(t(lang0, "subtitle")), value="subtitle")
        with gr.Row():
            with gr.Column(scale=2, min_width=340):
                # Only this app's own uploads: no server path or URL named through the API (ui_uploads).
                files = labels.add(accept_uploads_only(gr.File(
                    file_count="multiple", file_types=FILE_TYPES, type="filepath", label=t(lang0, "files"),
                    elem_id="ocr-files", height=140)), label="files")
                # fit_columns=False keeps one upload a thumbnail instead of a page-wide image.
                gallery = labels.add(gr.Gallery(label=t(lang0, "preview"), columns=4, height=170, interactive=False,
                                                elem_id="ocr-preview", object_fit="contain", allow_preview=False,
                                                fit_columns=False), label="preview")
                preset = labels.add(gr.Dropdown(labels.preset_choices(), value=first.key, label=t(lang0, "preset"),
                                                info=t(lang0, "preset_info"), elem_id="ocr-preset"),
                                    label="preset", info="preset_info")
                fields = labels.add(gr.Textbox("", label=t(lang0, "fields"), info=t(lang0, "fields_info"), visible=False,
                                               elem_id="ocr-fields"), label="fields", info="fields_info")
                target = labels.add(gr.Radio([("English", "English"), ("中文 Chinese", "Chinese")], value="English",
                                             label=t(lang0, "target_language"), visible=False, elem_id="ocr-target"),
                                    label="target_language")
                question = labels.add(gr.Textbox("", label=t(lang0, "question"), visible=False, lines=2,
                                                 elem_id="ocr-question"), label="question")
                hint = labels.add(gr.Textbox("", label=t(lang0, "language_hint"), info=t(lang0, "language_hint_info"),
                                             elem_id="ocr-hint"), label="language_hint", info="language_hint_info")
                pages = labels.add(gr.Textbox("", label=t(lang0, "pages"), info=t(lang0, "pages_info"), placeholder="1-3,7",
                                              elem_id="ocr-pages"), label="pages", info="pages_info")
                with gr.Accordion(t(lang0, "advanced"), open=False, elem_id="ocr-advanced") as advanced:
                    prompt = labels.add(gr.Textbox(value=handler.auto_prompt(first.key, "", "English", "", ""), lines=4,
                                                   label=t(lang0, "prompt"), info=t(lang0, "prompt_info"),
                                                   elem_id="ocr-prompt"), label="prompt", info="prompt_info")
                    max_tokens = labels.add(gr.Slider(16, settings.generation.max_tokens_cap, step=16,
                                                      value=min(first.max_tokens, settings.generation.max_tokens_cap),
                                                      label=t(lang0, "max_tokens"), elem_id="ocr-max-tokens"),
                                            label="max_tokens")
                labels.add(advanced, label="advanced")
                with gr.Row():
                    run_btn = labels.add(gr.Button(t(lang0, "run"), variant="primary", elem_id="ocr-run"), value="run")
                    stop_btn = labels.add(gr.Button(t(lang0, "stop"), variant="stop", elem_id="ocr-stop"), value="stop")
            with gr.Column(scale=3, min_width=400):
                progress = labels.add(gr.HTML("", label=t(lang0, "progress"), show_label=True,
                                              css_template=PROGRESS_CSS, elem_id="ocr-progress", js_on_load=None,
                                              container=True),
                                      label="progress")
                notice = labels.add(gr.Markdown("", label=t(lang0, "notice"), elem_id="ocr-notice"), label="notice")
                with gr.Tabs(elem_id="ocr-tabs") as tabs:
                    with gr.Tab(t(lang0, "tab_rendered"), id="rendered") as tab_rendered:
                        rendered = labels.add(gr.Markdown(
                            "", label=t(lang0, "rendered"), show_label=True, container=True, elem_id="ocr-rendered",
                            latex_delimiters=latex_delimiters(), sanitize_html=True, buttons=["copy"], max_height=720,
                            min_height=200, line_breaks=True), label="rendered")
                    with gr.Tab(t(lang0, "tab_raw"), id="raw") as tab_raw:
                        raw = labels.add(gr.Textbox(label=t(lang0, "raw"), lines=18, max_lines=40, buttons=["copy"],
                                                    interactive=False, elem_id="ocr-raw"), label="raw")
                    with gr.Tab(t(lang0, "tab_json"), id="json", visible=first.output == "json") as tab_json:
                        json_out = labels.add(gr.JSON(label=t(lang0, "json"), elem_id="ocr-json"), label="json")
                    with gr.Tab(t(lang0, "tab_boxes"), id="boxes", visible=first.output == "spotting") as tab_boxes:
                        boxes_image = labels.add(gr.Image(label=t(lang0, "boxes_image"), type="pil", format="png",
                                                          interactive=False, elem_id="ocr-boxes", height=560),
                                                 label="boxes_image")
                        boxes_table = labels.add(gr.Dataframe(headers=labels.box_headers(), interactive=False, wrap=True,
                                                              label=t(lang0, "boxes_table"), elem_id="ocr-box-table"),
                                                 label="boxes_table")
                for tab, key in ((tab_rendered, "tab_rendered"), (tab_raw, "tab_raw"), (tab_json, "tab_json"),
                                 (tab_boxes, "tab_boxes")):
                    labels.add(tab, label=key)
                downloads = labels.add(gr.File(label=t(lang0, "downloads"), file_count="multiple", interactive=False,
                                               elem_id="ocr-downloads", visible=False), label="downloads")
                with gr.Accordion(t(lang0, "history"), open=False) as history_box:
                    history_table = labels.add(gr.Dataframe(headers=labels.history_headers(), interactive=False, wrap=True,
                                                            label=t(lang0, "history_table"), elem_id="ocr-history"),
                                               label="history_table")
                    clear_btn = labels.add(gr.Button(t(lang0, "history_clear"), size="sm"), value="history_clear")
                labels.add(history_box, label="history")
        compare_event = add_compare(labels, handler, lang0, files=files, fields=fields, target=target, question=question,
                                    hint=hint, max_tokens=max_tokens, lang_switch=lang_switch,
                                    concurrency=app.queue_concurrency)
        history = gr.BrowserState([], storage_key=HISTORY_KEY, secret=history_secret(settings))
        auto_prompt = gr.State(prompt.value)
        last_entry = gr.State(None)  # the finished run's history entry; kept out of the API's inputs and outputs

        # --- task options: show only the inputs the task needs, and the exact prompt it will send
        option_inputs = [preset, fields, target, question, hint]

        def on_preset(key: str, f: str, tg: str, q: str, h: str) -> tuple[Any, ...]:
            p = presets[key]
            text = handler.auto_prompt(key, f, tg, q, h)
            selected = "boxes" if p.output == "spotting" else "json" if p.output == "json" else "rendered"
            return (gr.update(visible="fields" in p.needs), gr.update(visible="target_language" in p.needs),
                    gr.update(visible="question" in p.needs), text, text,
                    gr.update(value=min(p.max_tokens, settings.generation.max_tokens_cap)),
                    gr.Tab(visible=p.output == "json"), gr.Tab(visible=p.output == "spotting"), gr.Tabs(selected=selected))

        preset.change(on_preset, option_inputs, [fields, target, question, prompt, auto_prompt, max_tokens, tab_json,
                                                 tab_boxes, tabs], queue=False, api_visibility="private")

        def on_options(key: str, f: str, tg: str, q: str, h: str) -> tuple[str, str]:
            text = handler.auto_prompt(key, f, tg, q, h)
            return text, text

        for box in (fields, target, question, hint):
            box.change(on_options, option_inputs, [prompt, auto_prompt], queue=False, api_visibility="private")
        files.change(handler.preview, files, gallery, api_visibility="private", concurrency_limit=4,
                     concurrency_id="preview")

        # --- run and stop
        async def ocr(files: Any, preset: str, fields: str, target_language: str, question: str, language_hint: str,
                      pages: str, prompt: str, max_tokens: float, ui_language: str, auto_prompt: str,
                      request: gr.Request) -> Any:
            inputs = Inputs(files, preset, fields, target_language, question, language_hint, pages, prompt, max_tokens,
                            ui_language)
            async with aclosing(handler.run(inputs, auto_prompt, request)) as panes:
                async for values in panes:
                    yield values

        run_event = run_btn.click(
            ocr, [files, preset, fields, target, question, hint, pages, prompt, max_tokens, lang_switch, auto_prompt],
            [progress, notice, rendered, raw, json_out, boxes_image, boxes_table, downloads, last_entry],
            api_name="ocr", concurrency_limit=app.queue_concurrency, concurrency_id="engine", show_progress="minimal")
        def remember(entry: Any, old: Any) -> tuple[list[Any], list[list[str]]]:
            kept = [h for h in (old or []) if isinstance(h, dict)]
            new = ([entry] if isinstance(entry, dict) else []) + kept
            return new[:HISTORY_LIMIT], labels.history_rows(new[:HISTORY_LIMIT])

        run_event.then(remember, [last_entry, history], [history, history_table], api_visibility="private", queue=False)
        stop_btn.click(handler.stop, [lang_switch], [progress, notice], cancels=[run_event, compare_event], queue=False,
                       api_visibility="private")
        clear_btn.click(lambda: ([], []), None, [history, history_table], api_visibility="private", queue=False)

        def show_saved(saved: Any, lang: str, evt: gr.SelectData) -> tuple[str, str, str]:
            """A clicked history row's text back in the Rendered and Raw panes (it lives in this browser only)."""
            rows = [h for h in (saved or []) if isinstance(h, dict)]
            row = evt.index[0] if isinstance(evt.index, list | tuple) else evt.index
            if not isinstance(row, int) or not 0 <= row < len(rows):
                return gr.skip(), gr.skip(), gr.skip()
            entry = rows[row]
            text = str(entry.get("text", ""))
            task = str(entry.get("task", ""))
            output = presets[task].output if task in presets else "text"
            note = t(lang, "msg_history_shown", when=str(entry.get("when", "")), file=str(entry.get("file", "")))
            return page_markdown(text, output), text, note

        history_table.select(show_saved, [history, lang_switch], [rendered, raw, notice], queue=False,
                             api_visibility="private")

        # --- language: the browser's (or the configured) on load, then the switch
        def detect(request: gr.Request) -> str:
            accept = request.headers.get("accept-language") if request is not None else None
            return pick_language(app.ui_language, accept)

        async def engine_badge(lang: str) -> str:
            engine = (await service.health()).get("engine", {})
            status = engine.get("status") if engine.get("status") in ("up", "starting", "down") else "down"
            mark = "🟢" if engine.get("up") else "🟡" if status == "starting" else "🔴"
            # The detail is a user-safe English sentence (like every error text); shown only when not up.
            detail = "" if engine.get("up") or not engine.get("detail") else f" · {engine['detail']}"
            return f"{mark} {t(lang, 'engine_' + status)}{detail}"

        lang_switch.change(labels.relabel, lang_switch, labels.components(), queue=False, api_visibility="private")
        demo.load(detect, None, lang_switch, queue=False, api_visibility="private")
        demo.load(engine_badge, lang_switch, engine_md, api_visibility="private")
        lang_switch.change(engine_badge, lang_switch, engine_md, api_visibility="private")
        demo.load(labels.history_rows, history, history_table, queue=False, api_visibility="private")

    demo.queue(max_size=app.queue_max_size, default_concurrency_limit=app.queue_concurrency)
    return demo
