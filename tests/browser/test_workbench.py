"""The workbench in a real browser: streaming text, boxes, PDF progress, Stop, errors, XSS, languages."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from PIL import Image

from tests.browser.conftest import (
    RAW_JS,
    choose_task,
    raw_value,
    shot,
    show_tab,
    statuses,
    synthetic_page,
    synthetic_pdf,
    upload,
)
from tests.support.fake_engine import FakeEngine, Reply, split_text

WAIT_MS = 30_000


def _poll(page: object, until: callable, seconds: float = 30.0) -> list[str]:  # type: ignore[valid-type]
    """Raw-text values seen (in order, without repeats) until ``until()`` holds."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = raw_value(page)
        if value and (not seen or seen[-1] != value):
            seen.append(value)
        if until():
            return seen
        time.sleep(0.05)
    raise AssertionError(f"timed out; statuses {statuses(page)}, seen {seen[-3:]}")


def test_text_grows_in_several_steps_before_the_page_is_done(page, fake: FakeEngine, tmp_path: Path) -> None:
    text = "First line of the page.\nSecond line, a bit longer.\nThird and last line."
    fake.responder = lambda body: Reply(chunks=split_text(text, 8), token_delay=0.25)
    upload(page, synthetic_page(tmp_path / "letter.png"))
    show_tab(page, "Raw text")
    page.click("#ocr-run")
    page.wait_for_selector("#ocr-progress .ocr-chip[data-status=running]", timeout=WAIT_MS)
    page.wait_for_function(f"{RAW_JS}.length > 0", timeout=WAIT_MS)
    shot(page, "02-streaming")
    seen = _poll(page, lambda: statuses(page) == ["done"])
    partial = [v for v in seen if v != text]
    assert len(partial) >= 2, seen  # at least two visible steps before the final text
    assert all(text.startswith(v) for v in partial)
    page.wait_for_function(f"t => {RAW_JS} === t", arg=text, timeout=WAIT_MS)
    show_tab(page, "Rendered")
    page.wait_for_selector("#ocr-rendered :text('Second line')", timeout=WAIT_MS)
    page.wait_for_selector("#ocr-downloads [aria-label='letter.zip']", timeout=WAIT_MS)
    shot(page, "03-done")
    page.get_by_text("This browser's history").click()
    page.wait_for_function("(document.querySelector('#ocr-history') || {innerText: ''}).innerText.includes('letter.png')",
                           timeout=WAIT_MS)  # kept in this browser's storage
    shot(page, "10-history")


def test_spotting_boxes_are_drawn_at_the_model_coordinates(page, fake: FakeEngine, tmp_path: Path) -> None:
    # The synthetic page has dark blocks at known pixels; the model "finds" them in 0-1000 units.
    items = [{"box": [100, 100, 400, 200], "text": "alpha"}, {"box": [500, 500, 900, 633], "text": "beta"}]
    answer = json.dumps(items, ensure_ascii=False)
    fake.responder = lambda body: Reply(chunks=split_text(answer, 12), token_delay=0.2)
    choose_task(page, "Text spotting (boxes)")
    page.wait_for_selector("#ocr-boxes", state="visible")
    upload(page, synthetic_page(tmp_path / "spots.png"))
    page.click("#ocr-run")
    page.wait_for_selector("#ocr-boxes img", timeout=WAIT_MS)
    assert "done" not in statuses(page), "the page image should appear while the text still streams"
    _poll(page, lambda: statuses(page) == ["done"])
    page.wait_for_selector("#ocr-box-table :text('beta')", timeout=WAIT_MS)
    assert "alpha" in page.inner_text("#ocr-box-table")
    shot(page, "04-spotting-boxes")

    src = page.get_attribute("#ocr-boxes img", "src")
    image = Image.open(io.BytesIO(page.request.get(src).body())).convert("RGB")
    w, h = image.size
    assert (w, h) == (800, 600)  # shown in the original's size and proportions

    def red(x: int, y: int) -> bool:
        r, g, b = image.getpixel((x, y))
        return r > 200 and g < 60 and b < 60

    for item in items:
        x1, y1, x2, y2 = (v * s // 1000 for v, s in zip(item["box"], (w, h, w, h), strict=True))
        mid_x, mid_y = (x1 + x2) // 2, (y1 + y2) // 2
        assert red(x1 + 1, mid_y) and red(x2 - 2, mid_y), f"left/right edge of {item['text']}"
        assert red(mid_x, y1 + 1) and red(mid_x, y2 - 2), f"top/bottom edge of {item['text']}"
        assert not red(mid_x, mid_y), "only the outline is drawn"
    assert not red(w // 2, int(h * 0.4)), "no box where the model put none"


def test_a_pdf_shows_page_i_of_n_and_each_page_status(page, fake: FakeEngine, tmp_path: Path) -> None:
    fake.responder = lambda body: Reply(chunks=split_text("page text " * 6, 6), token_delay=0.12)
    upload(page, synthetic_pdf(tmp_path / "three.pdf", 3))
    page.click("#ocr-run")
    page.wait_for_selector("#ocr-progress :text('Page 2 of 3')", timeout=WAIT_MS)
    middle = statuses(page)
    assert middle[0] == "done" and middle[1] == "running" and middle[2] in ("queued", "running"), middle
    shot(page, "05-pdf-progress")
    _poll(page, lambda: statuses(page) == ["done", "done", "done"])
    assert "3 of 3 pages finished" in page.inner_text("#ocr-progress")
    assert "Page 3 of 3" in page.inner_text("#ocr-rendered")


def test_stop_ends_the_engine_request_and_keeps_the_text(page, fake: FakeEngine, tmp_path: Path) -> None:
    before = fake.disconnects
    fake.responder = lambda body: Reply(chunks=split_text("slow words " * 80, 4), token_delay=0.2)
    upload(page, synthetic_page(tmp_path / "long.png"))
    show_tab(page, "Raw text")
    page.click("#ocr-run")
    page.wait_for_function(f"{RAW_JS}.length > 8", timeout=WAIT_MS)
    page.click("#ocr-stop")
    assert fake.wait_until(lambda: fake.disconnects > before, timeout=15), "the engine never saw the stream close"
    page.wait_for_selector("#ocr-progress .ocr-chip[data-status=stopped]", timeout=WAIT_MS)
    assert "Stopped" in page.inner_text("#ocr-notice")
    assert raw_value(page).startswith("slow words")  # what arrived before Stop stays on screen
    shot(page, "06-stopped")


def test_a_corrupt_upload_shows_its_own_message(page, tmp_path: Path) -> None:
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"not really a png" * 4)
    upload(page, broken)
    page.click("#ocr-run")
    toast = page.get_by_text("damaged or incomplete", exact=False).first
    toast.wait_for(timeout=WAIT_MS)
    assert "/tmp" not in toast.inner_text()
    page.screenshot(path=str(shot(page, "07-corrupt-upload")))  # the viewport: the toast is fixed on screen


def test_markup_in_model_output_is_shown_not_run(page, fake: FakeEngine, tmp_path: Path) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    evil = ('Result <img src=x onerror="window.__xss=1;alert(1)"> <script>window.__xss=2;alert(2)</script>\n\n'
            '<svg onload="window.__xss=3"></svg> [click](javascript:window.__xss=4)\n\n'
            "<table><tr><td>cell A</td><td onclick=\"window.__xss=5\">cell B</td></tr></table>\n\nafter")
    fake.responder = lambda body: Reply(chunks=split_text(evil, 10), token_delay=0.02)
    choose_task(page, "Document to Markdown")
    upload(page, synthetic_page(tmp_path / "evil.png"))
    page.click("#ocr-run")
    _poll(page, lambda: statuses(page) == ["done"])
    page.wait_for_selector("#ocr-rendered table td:text('cell A')", timeout=WAIT_MS)  # tables stay tables
    page.click("#ocr-rendered td:text('cell B')")
    page.wait_for_timeout(500)
    assert page.evaluate("window.__xss") is None
    assert dialogs == []
    assert page.locator("#ocr-rendered script, #ocr-rendered img[onerror], #ocr-rendered [onload]").count() == 0
    shot(page, "08-xss-inert")
    show_tab(page, "Raw text")
    page.wait_for_function(f"t => {RAW_JS} === t", arg=evil, timeout=WAIT_MS)  # exactly what the model sent


@pytest.mark.parametrize("page", ["zh-CN"], indirect=True)
def test_the_chinese_interface_follows_the_browser_language(page) -> None:
    page.wait_for_selector("#ocr-run:text('开始识别')", timeout=WAIT_MS)
    assert "任务" in page.inner_text("#ocr-preset")
    shot(page, "09-chinese")
    page.get_by_label("English").check()
    page.wait_for_selector("#ocr-run:text('Run OCR')", timeout=WAIT_MS)
    assert "Task" in page.inner_text("#ocr-preset")


def test_empty_page_layout(page) -> None:
    assert page.locator("#ocr-files").is_visible()
    for label in ("Images or PDFs", "Task", "Pages (PDF)", "Rendered", "Raw text"):
        assert page.get_by_text(label, exact=False).first.is_visible(), label
    shot(page, "01-empty")
