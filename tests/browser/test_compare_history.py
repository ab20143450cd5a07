"""Compare two prompts side by side, bring back a history entry after a reload, the translated engine badge."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import RAW_JS, shot, show_tab, statuses, synthetic_page, upload
from tests.support.fake_engine import FakeEngine, Reply, split_text

WAIT_MS = 30_000
CMP_JS = "side => (document.querySelector('#ocr-cmp-raw-' + side + ' textarea') || {value: ''}).value"


def _by_prompt(answers: dict[str, str], default: str, delay: float = 0.1):  # type: ignore[no-untyped-def]
    """A responder that answers per prompt: the first marker found in the request picks the answer."""
    def respond(body: dict[str, Any]) -> Reply:
        sent = json.dumps(body.get("messages", []), ensure_ascii=False)
        text = next((answer for marker, answer in answers.items() if marker in sent), default)
        return Reply(chunks=split_text(text, 6), token_delay=delay)
    return respond


def _open_compare(page: Any) -> None:
    page.get_by_text("Compare two tasks or prompts").click()
    page.wait_for_selector("#ocr-cmp-run", state="visible")


def test_compare_shows_each_prompts_own_answer_side_by_side(page, fake: FakeEngine, tmp_path: Path) -> None:
    fake.responder = _by_prompt({"SAY-BRAVO": "bravo answer from the edited prompt"}, "alpha answer from the task")
    upload(page, synthetic_page(tmp_path / "pair.png"))
    _open_compare(page)
    page.fill("#ocr-cmp-prompt-b textarea", "SAY-BRAVO: read the page")
    page.click("#ocr-cmp-run")
    page.wait_for_function(f"({CMP_JS})('a').length > 0 && ({CMP_JS})('b').length > 0", timeout=WAIT_MS)
    page.wait_for_function(f"({CMP_JS})('a') === 'alpha answer from the task'", timeout=WAIT_MS)
    page.wait_for_function(f"({CMP_JS})('b') === 'bravo answer from the edited prompt'", timeout=WAIT_MS)
    page.wait_for_function("document.querySelector('#ocr-cmp-status').innerText.split('done').length === 3",
                           timeout=WAIT_MS)  # both sides report done
    sent = [json.dumps(r.get("messages", []), ensure_ascii=False) for r in fake.requests[-2:]]
    assert sum("SAY-BRAVO" in s for s in sent) == 1  # one request per side, the edit went to B only
    shot(page, "12-compare")


def test_compare_stop_ends_both_engine_streams(page, fake: FakeEngine, tmp_path: Path) -> None:
    before = fake.disconnects
    fake.responder = _by_prompt({}, "slow words " * 80, delay=0.2)
    upload(page, synthetic_page(tmp_path / "slow.png"))
    _open_compare(page)
    page.click("#ocr-cmp-run")
    page.wait_for_function(f"({CMP_JS})('a').length > 8 && ({CMP_JS})('b').length > 8", timeout=WAIT_MS)
    page.click("#ocr-cmp-stop")
    assert fake.wait_until(lambda: fake.disconnects >= before + 2, timeout=15), fake.disconnects - before
    page.wait_for_selector("#ocr-cmp-status :text('Stopped')", timeout=WAIT_MS)
    assert page.evaluate(f"({CMP_JS})('a')").startswith("slow words")  # what arrived stays on screen


def test_a_history_row_brings_its_text_back_after_a_reload(page, fake: FakeEngine, tmp_path: Path) -> None:
    text = "Remembered line one.\nRemembered line two."
    fake.responder = lambda body: Reply(chunks=split_text(text, 8), token_delay=0.02)
    upload(page, synthetic_page(tmp_path / "kept.png"))
    page.click("#ocr-run")
    deadline = time.monotonic() + 30
    while statuses(page) != ["done"]:
        assert time.monotonic() < deadline, statuses(page)
        time.sleep(0.05)
    page.wait_for_timeout(500)  # the history entry is written to localStorage just after the run
    page.reload()
    page.wait_for_selector("#ocr-run")
    page.get_by_text("This browser's history").click()
    page.wait_for_function("(document.querySelector('#ocr-history') || {innerText: ''}).innerText.includes('kept.png')",
                           timeout=WAIT_MS)  # kept in this browser's storage across the reload
    show_tab(page, "Raw text")
    assert page.evaluate(RAW_JS) == ""  # a fresh page: nothing shown until the row is picked
    page.locator("#ocr-history :text('Remembered line one') >> visible=true").first.click()
    page.wait_for_function(f"t => {RAW_JS} === t", arg=text, timeout=WAIT_MS)
    assert "kept.png" in page.inner_text("#ocr-notice")
    show_tab(page, "Rendered")
    page.wait_for_selector("#ocr-rendered :text('Remembered line two')", timeout=WAIT_MS)
    shot(page, "13-history-restored")


@pytest.mark.parametrize("page", ["zh-CN"], indirect=True)
def test_the_engine_badge_speaks_the_interface_language(page) -> None:
    page.wait_for_selector("#ocr-engine :text('引擎就绪')", timeout=WAIT_MS)
    page.get_by_label("English").check()
    page.wait_for_selector("#ocr-engine :text('Engine ready')", timeout=WAIT_MS)
