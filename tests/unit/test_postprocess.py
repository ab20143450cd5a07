"""Repetition guard, tail trimming and JSON extraction on realistic model answers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocr_ui.config import GenerationSettings
from ocr_ui.postprocess import RepetitionGuard, extract_json, has_tail_repetition, trim_repetition

PROSE = (
    "第一章 总则\n\n本合同由甲方与乙方于2024年3月1日签订。The parties agree to the following terms, "
    "including delivery within 30 days (see Annex A) and payment of ¥12,345.00.\n"
)


def _document(chars: int) -> str:
    """Varied, non-repeating text of about ``chars`` characters (numbered paragraphs)."""
    parts = []
    i = 0
    while sum(map(len, parts)) < chars:
        parts.append(f"{i}. {PROSE}")
        i += 1
    return "".join(parts)[:chars]


def _stream(text: str, step: int = 7):
    for end in range(step, len(text) + step, step):
        yield text[:end]


def _guard(**overrides: int) -> RepetitionGuard:
    return RepetitionGuard(GenerationSettings(**overrides))


# --------------------------------------------------------------------------- the guard


def test_guard_stops_a_stream_that_loops_on_a_short_unit() -> None:
    guard = _guard()
    text = _document(2500) + "<td></td>" * 400
    stopped_at = next((len(t) for t in _stream(text) if guard.feed(t)), None)
    assert stopped_at is not None
    # It stops within a check interval or so of the loop's start, not at the end of the stream.
    assert stopped_at < 2500 + 2 * 500 + 200


def test_guard_stops_a_loop_of_a_long_unit() -> None:
    unit = "| 合计 | 100 | 200 | 300 | 400 | 500 | 600 | 700 |\n"  # a whole table row, repeated
    guard = _guard()
    assert any(guard.feed(t) for t in _stream(_document(2100) + unit * 40))


def test_guard_never_stops_varied_text() -> None:
    guard = _guard()
    assert not any(guard.feed(t) for t in _stream(_document(30000), step=13))


def test_guard_ignores_toc_leader_dots_and_table_separators() -> None:
    toc = "".join(f"Chapter {i} {'.' * 40} {i * 7}\n" for i in range(1, 80))
    separator = "| a | b | c | d | e | f | g | h | i |\n" + "| --- " * 9 + "|"
    guard = _guard(repeat_check_after_chars=100, repeat_check_every_chars=10)
    assert not any(guard.feed(t) for t in _stream(toc + separator, step=3))


def test_guard_does_not_look_before_the_threshold() -> None:
    guard = _guard(repeat_check_after_chars=2000)
    assert guard.feed("ab" * 900) is False  # 1800 chars of pure loop, but below the threshold


def test_guard_checks_only_every_n_new_characters() -> None:
    guard = _guard(repeat_check_after_chars=100, repeat_check_every_chars=500)
    assert guard.feed(_document(150)) is False  # a check at 150: next one at 650
    looping = _document(150) + "xy" * 200  # 550 chars: loop present, but no check point reached
    assert guard.feed(looping) is False
    assert guard.feed(looping + "xy" * 60) is True


def test_guard_stays_tripped_once_it_has_fired() -> None:
    guard = _guard(repeat_check_after_chars=100)
    assert guard.feed("ab" * 200)
    assert guard.feed("anything")


def test_blank_units_are_not_repetition() -> None:
    assert not has_tail_repetition("text" + " " * 500, min_repeats=8, max_unit=256)
    assert not has_tail_repetition("text" + "\n" * 500, min_repeats=8, max_unit=256)


@pytest.mark.parametrize("unit", ["a", "ab", "的的", "0.", "<tr><td>x</td></tr>"])
def test_tail_repetition_detects_units_of_any_length(unit: str) -> None:
    assert has_tail_repetition("start " + unit * 300, min_repeats=8, max_unit=256)


def test_tail_repetition_respects_the_longest_unit() -> None:
    unit = "".join(chr(0x4E00 + i) for i in range(300))  # 300 distinct chars
    assert not has_tail_repetition(unit * 10, min_repeats=8, max_unit=256)
    assert has_tail_repetition(unit * 10, min_repeats=8, max_unit=300)


# --------------------------------------------------------------------------- trimming


def test_trim_keeps_one_copy_of_a_repeated_tail() -> None:
    body = _document(3000)
    text, trimmed = trim_repetition(body + "重复的内容。" * 50)
    assert trimmed
    assert text == body + "重复的内容。"


def test_trim_keeps_a_partial_unit_before_the_loop() -> None:
    body = _document(3000)
    text, trimmed = trim_repetition(body + "abc" * 100 + "ab")  # the stream stopped mid-unit
    assert trimmed
    assert text.startswith(body) and len(text) < len(body) + 10


def test_trim_never_touches_normal_text() -> None:
    for text in (_document(50000), _document(2500) + "\n" * 300, _document(2500) + "...." * 10):
        assert trim_repetition(text) == (text, False)


def test_trim_leaves_short_answers_alone() -> None:
    assert trim_repetition("ha" * 500) == ("ha" * 500, False)  # 1000 chars: below min_length
    assert trim_repetition("ha" * 500, min_length=100) == ("ha", True)


def test_trim_needs_enough_repeats() -> None:
    body = _document(3000)
    unit = "A longer unit of text that repeats. "
    assert trim_repetition(body + unit * 9)[1] is False
    assert trim_repetition(body + unit * 10) == (body + unit, True)


@settings(max_examples=60, deadline=None)
@given(body=st.text(min_size=0, max_size=300), unit=st.text(min_size=1, max_size=12).filter(str.strip),
       repeats=st.integers(min_value=0, max_value=120))
def test_trimmed_text_is_a_prefix_that_still_ends_with_the_unit(body: str, unit: str, repeats: int) -> None:
    text = body + unit * repeats
    out, trimmed = trim_repetition(text, min_length=0)
    assert text.startswith(out)
    if trimmed:
        assert len(out) < len(text)
        # What was cut is whole copies of a unit the kept text still ends with.
        cut = text[len(out):]
        assert any(cut == out[-n:] * (len(cut) // n) for n in range(1, len(cut) + 1) if len(cut) % n == 0)
    else:
        assert out == text


# --------------------------------------------------------------------------- JSON answers


def test_plain_json_object_parses_without_warning() -> None:
    assert extract_json('{"总金额": "￥77.10元", "里程数": "12.3"}') == ({"总金额": "￥77.10元", "里程数": "12.3"}, None)


def test_fenced_json_parses() -> None:
    value, warning = extract_json('```json\n{"a": [1, 2]}\n```')
    assert value == {"a": [1, 2]} and warning is None


def test_unclosed_fence_still_parses() -> None:
    assert extract_json('```json\n[{"a": 1}]\n')[0] == [{"a": 1}]


def test_text_around_the_json_is_reported_not_silently_dropped() -> None:
    value, warning = extract_json('Here is the result: {"a": 1} Hope this helps.')
    assert value == {"a": 1}
    assert warning and "text around" in warning


def test_single_quoted_json_is_read_as_a_fallback() -> None:
    assert extract_json("{'单价': '2.30元', 'ok': True, 'n': None}") == ({"单价": "2.30元", "ok": True, "n": None}, None)


@pytest.mark.parametrize("answer", [
    "", "   ", "The invoice total is 77.10", '{"a": 1', "{'a': {1, 2}}", "42", '"just a string"',
    "[1, 2", "{'a': __import__('os')}",
])
def test_invalid_json_gives_none_and_a_warning(answer: str) -> None:
    value, warning = extract_json(answer)
    assert value is None
    assert warning


def test_json_inside_prose_with_brackets_is_found() -> None:
    value, _ = extract_json('Fields [see below] (2 items): {"name": "Li Lei", "id": "A[1]"}')
    assert value == {"name": "Li Lei", "id": "A[1]"}
