"""Text-spotting answers -> boxes: HunyuanOCR 1.0's ``text(x1,y1),(x2,y2)`` runs and 1.5's JSON array.

Coordinates arrive normalised to 0-1000 of the original image (both versions); ``scale_boxes`` turns
them into pixels. Parsing never raises on model output: what cannot be read is simply not a box, and a
partial answer (while streaming) yields the boxes complete so far.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ocr_ui.errors import InvalidOptions

NORM = 1000  # the model's coordinate range: 0..1000 of the image's width / height


@dataclass(frozen=True)
class Box:
    """One recognised line: its text and an axis-aligned box (0-1000 units, or pixels after scaling)."""

    text: str
    x1: int
    y1: int
    x2: int
    y2: int


# The coordinate tail "(x1,y1),(x2,y2)", spaces tolerated. The text of an item is everything since the
# previous tail (as the official scorer does), so text with its own parentheses, "f(x) = 3(4)", stays whole.
_TAIL = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*,?\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_REF_QUAD = re.compile(r"<ref>(.*?)</ref>\s*<quad>\s*" + _TAIL.pattern + r"\s*</quad>", re.S)
_QUAD_POS_REF = re.compile(r"<quad><pos_(\d+)><pos_(\d+)><pos_(\d+)><pos_(\d+)></quad><ref>(.*?)</ref>", re.S)
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?")
_ONLY_PUNCT = re.compile(r"^[\s(),]*$")
_DECODER = json.JSONDecoder()


def _clamp(v: float) -> int:
    return max(0, min(NORM, round(v)))


def _box(text: str, coords: tuple[Any, ...]) -> Box | None:
    try:
        x1, y1, x2, y2 = (_clamp(float(c)) for c in coords)
    except (TypeError, ValueError, OverflowError):
        return None
    # Order the corners: a box drawn from (x2,y2) to (x1,y1) is the same box.
    return Box(text.strip(), min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2))


def _parse_runs(text: str) -> list[Box]:
    boxes: list[Box] = []
    last = 0
    for m in _TAIL.finditer(text):
        content = text[last:m.start()]
        last = m.end()
        # A gap made only of coordinate punctuation (",(5,6),(7,8)" after a complete item) is not an item.
        if _ONLY_PUNCT.match(content):
            continue
        box = _box(content, m.groups())
        if box is not None:
            boxes.append(box)
    return boxes


def _json_items(text: str) -> list[Any]:
    """The complete elements of the first JSON array in ``text``; stops quietly at a partial element."""
    start = text.find("[")
    if start < 0:
        return []
    items: list[Any] = []
    i = start + 1
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            value, i = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            break  # the element is still being streamed (or is broken): keep what came before
        items.append(value)
    return items


def _parse_json(text: str) -> list[Box]:
    boxes: list[Box] = []
    for item in _json_items(text):
        if not isinstance(item, dict):
            continue
        coords = item.get("box", item.get("bbox"))
        if not isinstance(coords, list | tuple) or len(coords) != 4:
            continue
        content = item.get("text", "")
        box = _box(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False), tuple(coords))
        if box is not None:
            boxes.append(box)
    return boxes


def parse_spotting(text: str) -> list[Box]:
    """Boxes (0-1000 units) from a spotting answer in any of the model's formats, partial or whole."""
    body = _FENCE.sub("", text, count=1)
    if body.lstrip().startswith("["):
        boxes = _parse_json(body)
        if boxes:
            return boxes
    if "<quad><pos_" in body:
        return [b for m in _QUAD_POS_REF.finditer(body) if (b := _box(m.group(5), m.groups()[:4])) is not None]
    if "<ref>" in body and "<quad>" in body:
        return [b for m in _REF_QUAD.finditer(body) if (b := _box(m.group(1), m.groups()[1:])) is not None]
    return _parse_runs(body)


def _check_size(width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise InvalidOptions("The image size must be positive to place the boxes.")


def scale_boxes(boxes: list[Box], width: int, height: int) -> list[Box]:
    """The same boxes in pixels of a ``width`` x ``height`` image (x * W / 1000, as the official demo)."""
    _check_size(width, height)
    return [
        Box(b.text, b.x1 * width // NORM, b.y1 * height // NORM, b.x2 * width // NORM, b.y2 * height // NORM)
        for b in boxes
    ]


def boxes_to_dicts(boxes: list[Box], width: int, height: int) -> list[dict[str, Any]]:
    """Export rows: text, pixel box [x1, y1, x2, y2] and the model's 0-1000 box."""
    pixels = scale_boxes(boxes, width, height)
    return [
        {"text": b.text, "box": [p.x1, p.y1, p.x2, p.y2], "box_norm": [b.x1, b.y1, b.x2, b.y2]}
        for b, p in zip(boxes, pixels, strict=True)
    ]


def boxes_to_json(boxes: list[Box], width: int, height: int) -> str:
    """``boxes_to_dicts`` as a JSON document (UTF-8 text kept readable) with the image size."""
    doc = {"width": width, "height": height, "boxes": boxes_to_dicts(boxes, width, height)}
    return json.dumps(doc, ensure_ascii=False, indent=2)
