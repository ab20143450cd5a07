"""Page ranges, the token budget and the size a page is sent at."""

from __future__ import annotations

import pytest

from ocr_ui import errors
from ocr_ui.preprocess import TEMPLATE_TOKENS, fit_size, parse_page_range, token_budget
from ocr_ui.profiles import get_profile, image_tokens, processor_size

V15 = get_profile("hunyuanocr-1.5")
V10 = get_profile("hunyuanocr-1.0")


@pytest.mark.parametrize(("text", "count", "expected"), [
    (None, 5, (1, 2, 3, 4, 5)),
    ("   ", 2, (1, 2)),
    ("1-3,5,9-", 10, (1, 2, 3, 5, 9, 10)),
    (" 2 , 4 - 5 ", 10, (2, 4, 5)),
    ("-3", 10, (1, 2, 3)),
    ("3,1,2,2", 10, (1, 2, 3)),
    ("1-2;7", 10, (1, 2, 7)),
    ("1-150,100-190", 400, tuple(range(1, 191))),
])
def test_page_ranges_select_sorted_unique_pages(text: str | None, count: int, expected: tuple[int, ...]) -> None:
    assert parse_page_range(text, count, 200) == expected


@pytest.mark.parametrize(("text", "fragment"), [
    ("abc", "not understood"),
    ("1--3", "not understood"),
    ("1-2-3", "not understood"),
    ("1.5", "not understood"),
    ("1 2", "not understood"),
    ("-", "not understood"),
    ("99999999999", "not understood"),
    ("0", "start at 1"),
    ("5-3", 'write "3-5"'),
    ("11", "Page 11 does not exist: the document has 10 pages"),
    ("2-999999999", "Page 999999999 does not exist"),
    (", ,", "selects no pages"),
    ("1," * 600, "too long"),
])
def test_bad_page_ranges_are_refused_with_a_message_saying_why(text: str, fragment: str) -> None:
    with pytest.raises(errors.InvalidPageRange) as info:
        parse_page_range(text, 10, 200)
    assert fragment in str(info.value)


def test_a_long_document_without_a_range_asks_for_one() -> None:
    with pytest.raises(errors.TooManyPages) as info:
        parse_page_range(None, 1000, 200)
    assert str(info.value) == ('The document has 1000 pages; at most 200 are read per request. '
                               'Give a page range such as "1-200".')


def test_a_range_selecting_more_than_max_pages_is_refused_counting_overlaps_once() -> None:
    with pytest.raises(errors.TooManyPages, match="selects 250 pages"):
        parse_page_range("1-150,100-250", 1000, 200)
    with pytest.raises(errors.TooManyPages, match="selects 1000 pages"):
        parse_page_range("1-", 1000, 200)


def test_the_token_budget_reserves_the_prompt_the_template_and_the_answer() -> None:
    prompt = "Extract the text in the image."
    assert token_budget(8192, prompt, 4096) == 8192 - 4096 - (len(prompt) // 2 + TEMPLATE_TOKENS)
    chinese = "提取图中的文字。"  # 8 characters, 24 UTF-8 bytes: reserved as 12 tokens
    assert token_budget(8192, chinese, 4096) == 8192 - 4096 - 12 - TEMPLATE_TOKENS
    assert token_budget(4096, prompt, 4096) < 0


@pytest.mark.parametrize("profile", [V15, V10], ids=lambda p: p.name)
@pytest.mark.parametrize(("width", "height"), [(1275, 1650), (4000, 3000), (3000, 4000), (2480, 3508), (900, 12000),
                                               (12000, 900), (640, 480), (2048, 2048), (513, 1025)])
@pytest.mark.parametrize("budget", [600, 1500, 4000, 20000])
def test_fitted_sizes_obey_every_limit_and_use_the_budget(profile, width: int, height: int, budget: int) -> None:
    w, h = fit_size(width, height, budget_tokens=budget, max_side=2048, profile=profile)
    assert w % 32 == 0 and h % 32 == 0
    assert max(w, h) <= 2048 and w <= max(32, width) and h <= max(32, height)
    assert image_tokens(w, h, profile) <= budget
    if w * h >= profile.min_pixels:
        assert processor_size(w, h, profile) == (w, h)  # the engine's processor keeps the size
    whole = (width // 32 * 32, height // 32 * 32)
    bound_by_side = max(w, h) > 2048 - 64
    if (w, h) != whole and not bound_by_side:
        assert image_tokens(w, h, profile) >= 0.85 * budget  # shrunk only as far as the budget needs


def test_a_page_smaller_than_the_processor_minimum_is_left_for_it_to_upscale() -> None:
    assert fit_size(100, 80, budget_tokens=4000, max_side=2048, profile=V15) == (96, 64)
    assert image_tokens(96, 64, V15) > (64 // 32) * (96 // 32 + 1) + 2  # counted after the upscale


def test_a_sliver_keeps_at_least_one_row_of_patches() -> None:
    w, h = fit_size(30000, 200, budget_tokens=4000, max_side=2048, profile=V15)
    assert (w, h) == (2048, 32)


def test_a_smaller_max_side_is_a_hard_cap() -> None:
    assert max(fit_size(4000, 3000, budget_tokens=20000, max_side=1280, profile=V15)) == 1280


def test_a_budget_too_small_for_any_page_explains_the_config_fix() -> None:
    with pytest.raises(errors.InvalidOptions) as info:
        fit_size(1000, 1000, budget_tokens=100, max_side=2048, profile=V15)
    message = str(info.value)
    assert "100 tokens" in message and "max_model_len" in message and "max_tokens" in message
    with pytest.raises(errors.InvalidOptions, match="Only 0 tokens"):
        fit_size(1000, 1000, budget_tokens=-500, max_side=2048, profile=V15)
