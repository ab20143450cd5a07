"""A JPEG that already fits is sent as its own bytes; anything needing a change is re-encoded as before."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from ocr_ui import errors
from ocr_ui.config import ImageSettings
from ocr_ui.preprocess import Page, iter_pages
from ocr_ui.profiles import get_profile
from tests.support import corpus

SETTINGS = ImageSettings()
PROFILE = get_profile("hunyuanocr-1.5")


def only_page(data: bytes, settings: ImageSettings = SETTINGS, *, max_side: int | None = None) -> Page:
    (page,) = iter_pages(data, settings, PROFILE, budget_tokens=4000, max_side=max_side)
    return page


def sent(page: Page) -> bytes:
    return base64.b64decode(page.data_url.split(",", 1)[1])


@pytest.mark.parametrize("data", [
    corpus.jpeg_bytes(640, 480),  # baseline, an empty EXIF block
    corpus.jpeg_bytes(640, 480, orientation=1),
    corpus.image_bytes("JPEG", 640, 480, quality=95, progressive=True),
], ids=["baseline", "orientation-1", "progressive"])
def test_a_fitting_upright_jpeg_is_sent_as_its_own_bytes(data: bytes) -> None:
    page = only_page(data)
    assert page.data_url.startswith("data:image/jpeg;base64,")
    assert sent(page) == data
    assert (page.width, page.height) == (640, 480) == page.image.size
    assert page.image.mode == "RGB"
    assert page.image.tobytes() == Image.open(io.BytesIO(data)).convert("RGB").tobytes()  # still decoded


def test_a_grayscale_jpeg_is_sent_as_is_but_its_page_image_is_rgb() -> None:
    data = corpus.jpeg_bytes(640, 480, mode="L")
    page = only_page(data)
    assert sent(page) == data
    assert page.image.mode == "RGB" and page.image.size == (640, 480)


def reencoded(data: bytes, settings: ImageSettings = SETTINGS, *, max_side: int | None = None) -> Page:
    page = only_page(data, settings, max_side=max_side)
    out = sent(page)
    assert out != data
    assert Image.open(io.BytesIO(out)).size == (page.width, page.height) == page.image.size
    return page


def test_a_jpeg_that_needs_resizing_is_reencoded() -> None:
    page = reencoded(corpus.jpeg_bytes(400, 300))
    assert (page.width, page.height) == (384, 288)


def test_a_jpeg_whose_half_scale_decode_is_the_size_sent_is_reencoded_not_forwarded_at_full_size() -> None:
    page = reencoded(corpus.jpeg_bytes(1280, 960), max_side=640)
    assert (page.width, page.height) == (640, 480)


def test_a_rotated_jpeg_is_reencoded_upright() -> None:
    page = reencoded(corpus.jpeg_bytes(640, 480, orientation=6))
    assert (page.width, page.height) == (480, 640)


def test_a_cmyk_jpeg_is_reencoded_as_rgb() -> None:
    data = corpus.image_bytes("JPEG", 640, 480, mode="CMYK")
    assert Image.open(io.BytesIO(data)).mode == "CMYK"
    assert Image.open(io.BytesIO(sent(reencoded(data)))).mode == "RGB"


def test_a_png_upload_is_encoded_as_jpeg() -> None:
    page = reencoded(corpus.png_bytes(640, 480))
    assert page.data_url.startswith("data:image/jpeg;base64,")


def test_a_jpeg_is_encoded_as_png_when_png_is_configured() -> None:
    page = reencoded(corpus.jpeg_bytes(640, 480), ImageSettings(encode_format="png"))
    assert page.data_url.startswith("data:image/png;base64,")


def test_a_jpeg_carrying_a_large_payload_sends_the_page_alone() -> None:
    plain = corpus.jpeg_bytes(640, 480)
    data = plain + b"\x00" * (640 * 480)  # data after the end-of-image marker: decoders ignore it
    out = sent(reencoded(data))
    assert len(out) < len(plain) * 2


def test_a_truncated_jpeg_that_would_otherwise_be_forwarded_is_still_refused_as_damaged() -> None:
    data = corpus.jpeg_bytes(640, 480)
    assert sent(only_page(data)) == data  # the whole file is forwarded...
    with pytest.raises(errors.CorruptFile, match="JPEG file is damaged"):
        only_page(corpus.truncated(data, 0.6))  # ...its first 60% is not


def test_a_forwarded_jpeg_is_decoded_in_full_only_when_its_pixels_are_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    from ocr_ui import image_pages

    calls: list[int] = []
    real = image_pages.decode_rgb

    def counting(*args: object, **kwargs: object) -> Image.Image:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(image_pages, "decode_rgb", counting)
    forwarded = only_page(corpus.jpeg_bytes(640, 480))
    assert calls == []  # the API path sends the bytes and never needs the pixels
    assert forwarded.image.size == (640, 480) and forwarded.image is forwarded.image  # decoded once, kept
    assert calls == [1]
    only_page(corpus.png_bytes(640, 480))  # re-encoded pages are decoded at once, as before
    assert calls == [1, 1]


def test_forwarded_page_is_render_pages_page_for_a_jpeg_sent_as_is_and_none_otherwise() -> None:
    from ocr_ui.preprocess import forwarded_page, open_document

    def check(data: bytes, settings: ImageSettings = SETTINGS) -> tuple[bool, bool]:
        doc = open_document(data, settings)
        ahead = forwarded_page(data, doc, 1, settings, PROFILE, budget_tokens=4000)
        rendered = only_page(data, settings)
        if ahead is not None:  # the same page render_page makes
            assert (ahead.data_url, ahead.width, ahead.height, ahead.image_tokens) == (
                rendered.data_url, rendered.width, rendered.height, rendered.image_tokens)
        return ahead is not None, sent(rendered) == data

    assert check(corpus.jpeg_bytes(640, 480)) == (True, True)
    assert check(corpus.jpeg_bytes(640, 480, orientation=6)) == (False, False)
    assert check(corpus.jpeg_bytes(4000, 3000)) == (False, False)  # needs resizing
    assert check(corpus.png_bytes(640, 480)) == (False, False)
    assert check(corpus.jpeg_bytes(640, 480), ImageSettings(encode_format="png")) == (False, False)
