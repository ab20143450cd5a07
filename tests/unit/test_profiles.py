"""Image-token arithmetic matches the published formula."""

from __future__ import annotations

import pytest

from ocr_ui.profiles import get_profile, image_tokens, processor_size

V10, V15 = get_profile("hunyuanocr-1.0"), get_profile("hunyuanocr-1.5")


@pytest.mark.parametrize(("w", "h", "tokens"), [(2048, 2048, 4162), (512, 512, 274), (1024, 768, 24 * 33 + 2)])
def test_image_tokens_follow_h32_times_w32_plus_one_plus_two(w: int, h: int, tokens: int) -> None:
    assert image_tokens(w, h, V10) == tokens


def test_images_above_the_pixel_cap_are_counted_after_the_processor_downscale() -> None:
    w, h = processor_size(4000, 3000, V10)
    assert w * h <= V10.max_pixels and w % 32 == 0 and h % 32 == 0
    assert image_tokens(4000, 3000, V10) == (h // 32) * (w // 32 + 1) + 2


def test_small_images_are_counted_after_the_processor_upscale() -> None:
    w, h = processor_size(100, 50, V10)
    assert w * h >= V10.min_pixels
    assert image_tokens(100, 50, V10) > image_tokens(32, 32, V10) - 1


def test_1_5_allows_larger_images_than_1_0() -> None:
    assert image_tokens(4096, 4096, V15) > image_tokens(4096, 4096, V10)
