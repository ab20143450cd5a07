"""Spotting answers in every format the model emits, whole and streamed, to boxes and pixels."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocr_ui.errors import InvalidOptions
from ocr_ui.spotting import Box, boxes_to_dicts, boxes_to_json, parse_spotting, scale_boxes

V10 = "字符串1(312,22),(493,49)字符串2(401,0),(666,194)"


def test_v10_runs_concatenated_back_to_back() -> None:
    assert parse_spotting(V10) == [Box("字符串1", 312, 22, 493, 49), Box("字符串2", 401, 0, 666, 194)]


def test_text_with_its_own_parentheses_stays_whole() -> None:
    text = "f(x) = 3(4)(10,20),(30,40)ATLANTA (AP) 金额(小写)(50,60),(70,80)"
    assert parse_spotting(text) == [Box("f(x) = 3(4)", 10, 20, 30, 40), Box("ATLANTA (AP) 金额(小写)", 50, 60, 70, 80)]


def test_spaces_inside_coordinates_are_tolerated() -> None:
    assert parse_spotting("Hello( 1, 2 ), ( 3 ,4 )\nWorld(5, 6)(7, 8)") == [
        Box("Hello", 1, 2, 3, 4), Box("World", 5, 6, 7, 8)]


def test_extra_coordinate_pairs_do_not_make_empty_items() -> None:
    assert parse_spotting("Hello(1,2),(3,4),(5,6),(7,8)") == [Box("Hello", 1, 2, 3, 4)]


def test_ref_quad_tags() -> None:
    text = "<ref>第一行</ref><quad>(1,2),(3,4)</quad><ref>(b) line</ref><quad>(5,6),(7,8)</quad>"
    assert parse_spotting(text) == [Box("第一行", 1, 2, 3, 4), Box("(b) line", 5, 6, 7, 8)]


def test_quad_pos_ref_tags() -> None:
    text = "<quad><pos_1><pos_2><pos_3><pos_4></quad><ref>a</ref><quad><pos_5><pos_6><pos_7><pos_8></quad><ref>b</ref>"
    assert parse_spotting(text) == [Box("a", 1, 2, 3, 4), Box("b", 5, 6, 7, 8)]


V15 = [{"box": [10, 20, 300, 40], "text": "标题 (Title)"}, {"bbox": [5, 50, 995, 80], "text": "正文"}]


@pytest.mark.parametrize("wrap", [
    lambda s: s, lambda s: f"```json\n{s}\n```", lambda s: f"```\n{s}```", lambda s: f"\n  {s}  \n",
])
def test_v15_json_array_plain_or_fenced(wrap) -> None:
    assert parse_spotting(wrap(json.dumps(V15, ensure_ascii=False))) == [
        Box("标题 (Title)", 10, 20, 300, 40), Box("正文", 5, 50, 995, 80)]


def test_partial_json_yields_the_complete_objects_so_far() -> None:
    full = json.dumps(V15 * 3, ensure_ascii=False)
    seen = [len(parse_spotting(full[:end])) for end in range(len(full) + 1)]
    assert seen == sorted(seen)  # boxes only ever appear while streaming, never vanish
    assert seen[-1] == 6
    assert parse_spotting(full[: full.index("正文")]) == [Box("标题 (Title)", 10, 20, 300, 40)]


def test_partial_v10_ignores_the_unfinished_item() -> None:
    assert parse_spotting(V10[:-5]) == [Box("字符串1", 312, 22, 493, 49)]


def test_json_items_without_a_usable_box_are_skipped() -> None:
    text = json.dumps([{"text": "no box"}, {"box": [1, 2, 3], "text": "short"}, {"box": ["a", 2, 3, 4]},
                       "str", {"box": [1.6, 2.4, 3, 4], "text": 7}])
    assert parse_spotting(text) == [Box("7", 2, 2, 3, 4)]


def test_coordinates_are_clamped_and_corners_ordered() -> None:
    text = json.dumps([{"box": [1200, 900, -5, 100], "text": "x"}])
    assert parse_spotting(text) == [Box("x", 0, 100, 1000, 900)]
    assert parse_spotting("y(999999,5),(3,2)") == [Box("y", 3, 2, 1000, 5)]


@pytest.mark.parametrize("answer", ["", "图中没有文字", "no text", "[]", "```json\n[]\n```", "[{", "just words (1,2)"])
def test_answers_without_boxes_give_an_empty_list(answer: str) -> None:
    assert parse_spotting(answer) == []


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_parsing_never_raises_and_boxes_stay_in_range(text: str) -> None:
    for b in parse_spotting(text):
        assert 0 <= b.x1 <= b.x2 <= 1000 and 0 <= b.y1 <= b.y2 <= 1000


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet=st.characters(blacklist_characters="()\"\\", blacklist_categories=("Cs",)),
                                  min_size=1, max_size=20).filter(lambda s: re.sub(r"[\s(),]", "", s)),
                          *[st.integers(0, 1000)] * 4), max_size=6))
def test_v10_round_trip(items) -> None:
    text = "".join(f"{t}({a},{b}),({c},{d})" for t, a, b, c, d in items)
    got = parse_spotting(text)
    assert [(g.x1, g.y1, g.x2, g.y2) for g in got] == [
        (min(a, c), min(b, d), max(a, c), max(b, d)) for _, a, b, c, d in items]
    assert [g.text for g in got] == [t.strip() for t, *_ in items]


def test_scale_boxes_to_pixels_of_the_original_image() -> None:
    boxes = [Box("a", 0, 0, 1000, 1000), Box("b", 250, 500, 750, 999)]
    assert scale_boxes(boxes, 1920, 1080) == [Box("a", 0, 0, 1920, 1080), Box("b", 480, 540, 1440, 1078)]


def test_scale_boxes_refuses_an_empty_image() -> None:
    with pytest.raises(InvalidOptions, match="size"):
        scale_boxes([Box("a", 0, 0, 1, 1)], 0, 100)


def test_export_has_pixel_and_normalised_boxes() -> None:
    boxes = [Box("标题", 100, 200, 300, 400)]
    assert boxes_to_dicts(boxes, 500, 1000) == [{"text": "标题", "box": [50, 200, 150, 400], "box_norm": [100, 200, 300, 400]}]
    doc = json.loads(boxes_to_json(boxes, 500, 1000))
    assert doc["width"] == 500 and doc["boxes"][0]["box"] == [50, 200, 150, 400]
    assert "标题" in boxes_to_json(boxes, 500, 1000)  # readable UTF-8, not \\u escapes
