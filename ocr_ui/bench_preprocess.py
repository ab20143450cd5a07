"""Preprocessing cost per page on this machine: a 4000x3000 phone JPEG and a 200 dpi A4 PDF page.

Times what the service does before a page leaves for the engine: ``open_document`` (sniff, size and
page checks) plus ``render_page`` (decode or rasterise, EXIF, resize to the token budget, JPEG/PNG
encode, base64). Single-threaded, as the service runs it (one ``to_thread`` call per page).
"""

from __future__ import annotations

import time
from typing import Any

from ocr_ui import preprocess, synthetic_pages
from ocr_ui.bench_report import percentile
from ocr_ui.config import Settings
from ocr_ui.profiles import get_profile
from ocr_ui.prompts import TaskOptions, build_prompt, get_preset


def _time_page(data: bytes, settings: Settings, repeat: int, budget: int) -> dict[str, Any]:
    profile = get_profile(settings.model.profile)
    times, page = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        doc = preprocess.open_document(data, settings.images)
        page = preprocess.render_page(data, doc, 1, settings.images, profile, budget_tokens=budget)
        times.append(time.perf_counter() - start)
    assert page is not None  # repeat >= 1
    return {"file_bytes": len(data), "source": f"{page.source_width}x{page.source_height}",
            "sent": f"{page.width}x{page.height}", "image_tokens": page.image_tokens,
            "data_url_bytes": len(page.data_url), "ms_p50": round(1000 * (percentile(times, 50) or 0), 1),
            "ms_min": round(1000 * min(times), 1), "ms_max": round(1000 * max(times), 1), "repeat": repeat}


def measure(settings: Settings, repeat: int = 5) -> list[dict[str, Any]]:
    """One result per input kind, each over ``repeat`` runs (after one warm-up run)."""
    # The budget the service computes for the "text" preset (its prompt, its max_tokens).
    profile = get_profile(settings.model.profile)
    preset = get_preset(profile.name, "text")
    max_tokens = min(preset.max_tokens, settings.generation.max_tokens_cap)
    prompt = build_prompt(profile, preset, TaskOptions())
    budget = preprocess.token_budget(settings.engine.max_model_len, prompt, max_tokens)
    pdf_settings = settings.model_copy(update={"images": settings.images.model_copy(update={"pdf_dpi": 200})})
    inputs = [("photo_jpeg_4000x3000", synthetic_pages.photo_jpeg(), settings),
              ("pdf_a4_200dpi", synthetic_pages.a4_pdf(dpi=200), pdf_settings)]
    results = []
    for name, data, chosen in inputs:
        _time_page(data, chosen, 1, budget)
        results.append({"input": name, "encode_format": chosen.images.encode_format, "pdf_dpi": chosen.images.pdf_dpi,
                        **_time_page(data, chosen, repeat, budget)})
    return results
