"""What the result panes show, built from the service's page results: progress, Markdown, raw text,
boxes drawn on the page, and the download files. No gradio import: everything here is plain data.

Model output is untrusted. Markdown goes through ``render.render_markdown_safe`` before gr.Markdown
(which sanitises again); the progress panel is HTML we build, with every piece of text escaped.
"""

from __future__ import annotations

import html
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from ocr_ui.i18n import t
from ocr_ui.render import render_markdown_safe
from ocr_ui.spotting import Box, boxes_to_dicts, parse_spotting, scale_boxes

BOX_COLOR = (255, 0, 0)  # pure red: easy to see on paper, easy for the browser test to find
_HAS_MATH = re.compile(r"\$|\\\[|\\\(")


@dataclass
class FileView:
    """One uploaded file's part of the run: its name and the latest result of each page."""

    name: str
    pages: list[Any] = field(default_factory=list)  # service.PageResult, in page order
    error: str | None = None  # the whole file was refused (bad input); no pages then


def page_markdown(text: str, output: str) -> str:
    """One page's answer as safe Markdown for its preset's output kind."""
    if not text:
        return ""
    if output == "json":
        return "```json\n" + text.replace("```", "ʼʼʼ") + "\n```"
    if output == "spotting":
        boxes = parse_spotting(text)
        if not boxes:
            return "```\n" + text.replace("```", "ʼʼʼ") + "\n```"
        return "\n".join(f"{i}. {render_markdown_safe(b.text)}" for i, b in enumerate(boxes, 1))
    if output == "latex" and not _HAS_MATH.search(text):
        text = f"$$\n{text}\n$$"
    return render_markdown_safe(text)


def _many(files: list[FileView]) -> bool:
    return len(files) > 1 or any(len(f.pages) > 1 for f in files)


def page_label(lang: str, view: FileView, position: int, number: int) -> str:
    """'Page i of n' counted over the selected pages, with the file's own page number when it differs."""
    label = t(lang, "page_of", i=position, n=len(view.pages))
    return label if position == number else f"{label} (p. {number})"


def result_markdown(lang: str, files: list[FileView], output: str,
                    cache: dict[tuple[int, int, int], str] | None = None) -> str:
    """Every page's rendered answer, with 'Page i of n' headings when there is more than one page.

    ``cache`` keeps finished pages' Markdown between redraws, so a long PDF is not re-rendered per token.
    """
    parts: list[str] = []
    many = _many(files)
    for fi, view in enumerate(files):
        if len(files) > 1:
            parts.append("### " + render_markdown_safe(t(lang, "file_heading", name=view.name)))
        for position, page in enumerate(view.pages, 1):
            if many:
                status = t(lang, f"status_{page.status}")
                parts.append(f"#### {page_label(lang, view, position, page.number)} · {status}")
            key = (fi, page.number, len(page.text))
            if cache is not None and key in cache:
                parts.append(cache[key])
                continue
            rendered = page_markdown(page.text, output)
            if cache is not None and page.status in ("done", "failed", "stopped"):
                cache[key] = rendered
            parts.append(rendered)
    return "\n\n".join(p for p in parts if p)


def raw_text(files: list[FileView]) -> str:
    """Exactly what the model sent; pages are separated by a marked line only when there are several."""
    if not _many(files):
        return "".join(p.text for f in files for p in f.pages)
    parts = []
    for view in files:
        for page in view.pages:
            parts.append(f"===== {view.name} · page {page.number}/{len(view.pages)} =====\n{page.text}")
    return "\n\n".join(parts)


def progress_html(lang: str, files: list[FileView]) -> str:
    """The progress panel: overall bar, 'page i of n' of the running page, one chip per page."""
    total = sum(len(f.pages) for f in files)
    finished = sum(1 for f in files for p in f.pages if p.status in ("done", "failed"))  # stopped pages are not
    running = next(((f, p) for f in files for p in f.pages if p.status == "running"), None)
    rows = [f'<div class="ocr-overall"><progress max="{max(total, 1)}" value="{finished}"></progress> '
            f'<span>{html.escape(t(lang, "overall", done=finished, n=total))}</span></div>']
    if running:
        view, page = running
        label = page_label(lang, view, view.pages.index(page) + 1, page.number)
        name = f"{view.name} · " if len(files) > 1 else ""
        rows.append(f'<div class="ocr-current">{html.escape(name + label)} · {html.escape(t(lang, "status_running"))}</div>')
    for view in files:
        chips = []
        for position, page in enumerate(view.pages, 1):
            status = t(lang, f"status_{page.status}")
            tip = page_label(lang, view, position, page.number) + f": {status}"
            if page.error:
                tip += f" ({page.error})"
            chips.append(f'<li class="ocr-chip st-{html.escape(page.status)}" title="{html.escape(tip)}" '
                         f'data-page="{page.number}" data-status="{html.escape(page.status)}">'
                         f'{page.number}<span class="ocr-chip-status">{html.escape(status)}</span></li>')
        heading = f'<div class="ocr-file">{html.escape(view.name)}</div>' if len(files) > 1 else ""
        error = f'<div class="ocr-file-error">{html.escape(view.error)}</div>' if view.error else ""
        rows.append(f'{heading}{error}<ol class="ocr-chips">{"".join(chips)}</ol>')
    return f'<div class="ocr-progress" role="status" aria-live="polite">{"".join(rows)}</div>'


def draw_boxes(image: Image.Image, boxes: list[Box]) -> Image.Image:
    """A copy of the page with each box (0-1000 units) drawn as a red rectangle at its pixel position."""
    out = image.convert("RGB").copy()
    draw = ImageDraw.Draw(out)
    width = max(3, round(max(out.size) / 300))
    for b in scale_boxes(boxes, out.width, out.height):
        draw.rectangle((b.x1, b.y1, max(b.x1, b.x2 - 1), max(b.y1, b.y2 - 1)), outline=BOX_COLOR, width=width)
    return out


def box_rows(files: list[FileView], sizes: dict[tuple[int, int], tuple[int, int]]) -> list[list[Any]]:
    """Table rows (page, text, pixel box) of every recognised line; ``sizes`` maps (file, page) to pixels."""
    rows: list[list[Any]] = []
    for fi, view in enumerate(files):
        for page in view.pages:
            w, h = sizes.get((fi, page.number), (page.source_width or 1000, page.source_height or 1000))
            for item in boxes_to_dicts(parse_spotting(page.text), w, h) if page.text else []:
                rows.append([page.number, item["text"], ", ".join(str(v) for v in item["box"])])
    return rows


def export_document(files: list[FileView], *, preset: str, prompt: str, output: str) -> dict[str, Any]:
    """The JSON download: every page with status, text, errors and (spotting) boxes in source pixels."""
    doc: dict[str, Any] = {"preset": preset, "prompt": prompt, "files": []}
    for view in files:
        pages = []
        for p in view.pages:
            item: dict[str, Any] = {"page": p.number, "status": p.status, "text": p.text, "error": p.error,
                                    "error_code": p.error_code, "finish_reason": p.finish_reason}
            if output == "spotting" and p.text:
                item["boxes"] = boxes_to_dicts(parse_spotting(p.text), p.source_width or 1000, p.source_height or 1000)
            pages.append(item)
        doc["files"].append({"name": view.name, "error": view.error, "pages": pages})
    return doc


def write_downloads(folder: Path, lang: str, files: list[FileView], *, preset: str, prompt: str,
                    output: str) -> list[str]:
    """Markdown, plain text, JSON (with boxes) and a zip of all three, written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = Path(files[0].name).stem[:60] if len(files) == 1 and files[0].name else "ocr-result"
    stem = re.sub(r"[^\w.-]+", "_", stem) or "ocr-result"
    md = folder / f"{stem}.md"
    md.write_text(result_markdown(lang, files, output) + "\n", encoding="utf-8")
    txt = folder / f"{stem}.txt"
    txt.write_text(raw_text(files) + "\n", encoding="utf-8")
    js = folder / f"{stem}.json"
    js.write_text(json.dumps(export_document(files, preset=preset, prompt=prompt, output=output),
                             ensure_ascii=False, indent=2), encoding="utf-8")
    archive = folder / f"{stem}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in (md, txt, js):
            zf.write(path, path.name)
    return [str(md), str(txt), str(js), str(archive)]
