"""Model output handling: stop endless repetition, trim a repeated tail, read JSON answers.

Spotting boxes live in ``ocr_ui.spotting`` and safe rendering in ``ocr_ui.render``; both are re-exported
here so callers import model-output helpers from one place.

Greedy decoding can fall into a loop that repeats a short unit until ``max_tokens`` (a known HunyuanOCR
failure). ``RepetitionGuard`` stops such a stream early, like 1.5's official client (inspect the tail at
check points); ``trim_repetition`` keeps one copy of a repeated tail, like the official
``clean_repeated_substrings``. Both demand that the repeated run spans at least ``MIN_REPEATED_SPAN``
characters, so table-of-contents leader dots or an 8-column table separator never cut a page short.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from ocr_ui.config import GenerationSettings
from ocr_ui.render import latex_delimiters, render_markdown_safe, sanitize_html
from ocr_ui.spotting import Box, boxes_to_dicts, boxes_to_json, parse_spotting, scale_boxes

__all__ = [
    "MIN_REPEATED_SPAN", "Box", "RepetitionGuard", "boxes_to_dicts", "boxes_to_json", "extract_json",
    "has_tail_repetition", "latex_delimiters", "parse_spotting", "render_markdown_safe", "sanitize_html",
    "scale_boxes", "trim_repetition",
]

# Shortest repeated run (unit x repeats) that counts as a loop. Real loops run on to max_tokens, so
# asking for ~100 characters costs at most one more check interval; "........" leaders in a table of
# contents and "| --- | --- |" separators are shorter and legitimate.
MIN_REPEATED_SPAN = 100


def has_tail_repetition(text: str, *, min_repeats: int, max_unit: int, min_span: int = MIN_REPEATED_SPAN) -> bool:
    """True when ``text`` ends with one non-blank unit of 1..max_unit chars repeated enough times."""
    n = len(text)
    for length in range(1, min(max_unit, n // min_repeats) + 1):
        unit = text[-length:]
        if not unit.strip():
            continue
        repeats = max(min_repeats, -(-min_span // length))  # ceil: short units need more copies
        if repeats * length <= n and text.endswith(unit * repeats):
            return True
    return False


class RepetitionGuard:
    """Per-stream early stop: ``feed(full_text)`` after each chunk; True means stop the stream now."""

    def __init__(self, settings: GenerationSettings) -> None:
        self.settings = settings
        self.next_check = settings.repeat_check_after_chars
        self.tripped = False

    def feed(self, full_text: str) -> bool:
        """Cheap between check points (a length comparison); inspects the tail at each one."""
        if self.tripped:
            return True
        if len(full_text) < self.next_check:
            return False
        s = self.settings
        self.next_check = len(full_text) + s.repeat_check_every_chars
        tail = full_text[-s.repeat_window_chars:]
        self.tripped = has_tail_repetition(tail, min_repeats=s.repeat_min_repeats, max_unit=s.repeat_max_unit_chars)
        return self.tripped


def _z_array(s: str) -> list[int]:
    """z[i] = length of the longest common prefix of s and s[i:] (linear time)."""
    n = len(s)
    z = [0] * n
    left = right = 0
    for i in range(1, n):
        if i < right:
            z[i] = min(right - i, z[i - left])
        while i + z[i] < n and s[z[i]] == s[i + z[i]]:
            z[i] += 1
        if i + z[i] > right:
            left, right = i, i + z[i]
    return z


def trim_repetition(text: str, *, min_repeats: int = 10, min_length: int = 2000,
                    min_span: int = MIN_REPEATED_SPAN) -> tuple[str, bool]:
    """Keep one copy of a unit repeated ``min_repeats``+ times at the end; (text, whether it was trimmed)."""
    n = len(text)
    if n < min_length:
        return text, False
    # On the reversed text, z[L] + L is how far the text's last L characters keep repeating backwards:
    # one linear pass instead of comparing every unit length (answers can be 100k characters).
    z = _z_array(text[::-1])
    for length in range(1, n // min_repeats + 1):
        count = (length + z[length]) // length if length < n else 1
        if count >= min_repeats and count * length >= min_span and text[-length:].strip():
            return text[: n - length * (count - 1)], True
    return text, False


_FENCED = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|$)", re.S)
_DECODER = json.JSONDecoder()


def _first_value(text: str) -> tuple[Any, int, int] | None:
    """The first JSON object or array in ``text`` as (value, start, end), or None."""
    for attempt, m in enumerate(re.finditer(r"[\[{]", text)):
        if attempt >= 64:  # bounded work on long prose full of brackets
            break
        try:
            value, end = _DECODER.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict | list):
            return value, m.start(), end
    return None


def _python_literal(text: str) -> Any:
    """A dict/list written with single quotes (Python style), if the whole text is one; else None."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    end = max(text.rfind("}"), text.rfind("]"))
    if start < 0 or end <= start or end - start > 200_000:
        return None
    try:
        value = ast.literal_eval(text[start:end + 1])
        json.dumps(value)  # only plain data (no sets, bytes, ...) counts as a JSON answer
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict | list) else None


def extract_json(text: str) -> tuple[dict[str, Any] | list[Any] | None, str | None]:
    """(value, warning) from a JSON answer, fenced or plain; (None, why) when it is not JSON."""
    fenced = _FENCED.search(text)
    body = fenced.group(1) if fenced else text
    outside = (text[: fenced.start()] + text[fenced.end():]) if fenced else ""
    stripped = body.strip()
    if not stripped:
        return None, "The answer is empty, so there is no JSON to show."
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict | list):
        return value, _outside_warning(outside)
    found = _first_value(body)
    if found is not None:
        value, start, end = found
        return value, _outside_warning(outside + body[:start] + body[end:])
    value = _python_literal(body)
    if value is not None:
        return value, _outside_warning(outside)
    return None, "The answer is not valid JSON; it is shown as the model wrote it."


def _outside_warning(rest: str) -> str | None:
    if rest.strip():
        return "The answer had text around its JSON; that text is not in the parsed result (see the raw answer)."
    return None
