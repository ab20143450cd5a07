"""EventTracker: NDJSON page events carry only new text, and held-back text is never lost."""

from __future__ import annotations

from ocr_ui.api_models import EventTracker
from ocr_ui.service import JobUpdate, PageResult


def snapshot(*pages: PageResult, done: bool = False) -> JobUpdate:
    return JobUpdate("r1", list(pages), 1, len(pages), done)


def test_text_held_back_between_due_calls_arrives_whole_in_the_next_delta() -> None:
    tracker, page = EventTracker(), PageResult(number=1, status="running")
    assert [e["status"] for e in tracker.events(snapshot(page))] == ["running"]
    sent = []
    for i in range(500):
        page.text += f"{i} "
        sent += [e["delta"] for e in tracker.events(snapshot(page), text_due=i % 100 == 99)]
    page.status = "done"
    sent += [e["delta"] for e in tracker.events(snapshot(page, done=True))]
    assert sent[0] == "0 "  # the first text is never held back
    assert len(sent) == 1 + 5 + 1  # then one line per due call, and the final status line
    assert "".join(sent) == page.text


def test_a_status_change_goes_out_even_when_text_is_not_due() -> None:
    tracker, page = EventTracker(), PageResult(number=1, status="running", text="a")
    tracker.events(snapshot(page))
    page.text, page.status = "abc", "failed"
    events = tracker.events(snapshot(page), text_due=False)
    assert [(e["status"], e["delta"]) for e in events] == [("failed", "bc")]


def test_a_shrunk_text_is_resent_whole_even_when_text_is_not_due() -> None:
    tracker, page = EventTracker(), PageResult(number=1, status="running", text="abababab")
    tracker.events(snapshot(page))
    page.text = "ab"
    events = tracker.events(snapshot(page), text_due=False)
    assert events[0]["text"] == "ab" and events[0]["delta"] == ""
