"""Uploaded bytes to pages: every supported type decodes to the right RGB page at the right size."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from ocr_ui import errors
from ocr_ui.config import ImageSettings
from ocr_ui.preprocess import Document, Page, iter_pages, open_document, render_page, sniff
from ocr_ui.profiles import get_profile, image_tokens
from tests.support import corpus

SETTINGS = ImageSettings()
PROFILE = get_profile("hunyuanocr-1.5")
BUDGET = 4000


def only_page(data: bytes, settings: ImageSettings = SETTINGS, *, budget_tokens: int = BUDGET,
              pages: str | None = None) -> Page:
    pages_out = list(iter_pages(data, settings, PROFILE, budget_tokens=budget_tokens, pages=pages))
    assert len(pages_out) == 1
    return pages_out[0]


def decoded(data_url: str) -> Image.Image:
    head, b64 = data_url.split(",", 1)
    assert head in {"data:image/jpeg;base64", "data:image/png;base64"}
    return Image.open(io.BytesIO(base64.b64decode(b64)))


@pytest.mark.parametrize(("fmt", "kind"), [("PNG", "png"), ("JPEG", "jpeg"), ("WEBP", "webp"), ("BMP", "bmp"),
                                           ("TIFF", "tiff"), ("GIF", "gif")])
def test_each_image_type_is_recognised_by_content_and_becomes_one_rgb_page(fmt: str, kind: str) -> None:
    data = corpus.image_bytes(fmt, 400, 300)
    assert sniff(data) == kind
    page = only_page(data)
    assert (page.number, page.total) == (1, 1)
    assert page.image.mode == "RGB"
    assert (page.source_width, page.source_height) == (400, 300)
    assert (page.width, page.height) == (384, 288)  # largest multiples of 32 not above the source
    assert page.image.size == (page.width, page.height)
    assert page.image_tokens == image_tokens(384, 288, PROFILE)
    assert page.image.getpixel((200, 2)) == (0, 0, 0) or sum(page.image.getpixel((200, 2))) < 60  # the top bar


def test_a_pdf_is_recognised_even_with_junk_before_its_header() -> None:
    assert sniff(b"\x00\x00junk\n" + corpus.pdf_bytes(1)) == "pdf"


def test_the_data_url_carries_the_image_that_is_sent_and_never_a_path() -> None:
    page = only_page(corpus.png_bytes(300, 200))
    assert page.data_url.startswith("data:image/jpeg;base64,")
    assert "file:" not in page.data_url and "/tmp" not in page.data_url
    assert decoded(page.data_url).size == (page.width, page.height)


def test_png_encoding_is_lossless_when_configured() -> None:
    settings = ImageSettings(encode_format="png")
    page = only_page(corpus.png_bytes(320, 256), settings)
    assert page.data_url.startswith("data:image/png;base64,")
    assert decoded(page.data_url).convert("RGB").tobytes() == page.image.tobytes()


def test_exif_orientation_is_applied_before_sizing() -> None:
    # Stored 640x480 with the black bar on top; orientation 6 displays it rotated 90° clockwise,
    # so the page is portrait and the bar runs down the right-hand edge.
    page = only_page(corpus.jpeg_bytes(640, 480, orientation=6))
    assert (page.source_width, page.source_height) == (480, 640)
    assert page.height > page.width
    right, left = page.image.getpixel((page.width - 3, page.height // 2)), page.image.getpixel((3, page.height // 2))
    assert sum(right) < 100 < sum(left)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P", "CMYK", "1", "L", "I", "F"])
def test_every_pixel_mode_becomes_rgb_with_the_text_still_dark_on_white(mode: str) -> None:
    fmt = "TIFF" if mode in {"CMYK", "I", "F"} else "PNG"
    page = only_page(corpus.image_bytes(fmt, 256, 192, mode=mode))
    assert page.image.mode == "RGB"
    assert page.image.getpixel((128, 150)) == (255, 255, 255) or min(page.image.getpixel((128, 150))) > 240
    assert max(page.image.getpixel((128, 2))) < 40  # the black bar stays black


def test_transparent_pixels_are_flattened_on_white_not_black() -> None:
    image = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    image.paste((0, 0, 0, 255), (0, 0, 64, 8))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    page = only_page(buffer.getvalue())
    assert page.image.getpixel((40, 40)) == (255, 255, 255)
    assert page.image.getpixel((10, 2)) == (0, 0, 0)


def test_sixteen_bit_grayscale_is_scaled_not_clipped_to_white() -> None:
    page = only_page(corpus.sixteen_bit_png(64, 48, value=40000), ImageSettings(encode_format="png"))
    assert page.image.getpixel((10, 10)) == (155, 155, 155)  # 40000 / 257


def test_animated_gif_and_webp_give_their_first_frame_only() -> None:
    for data in (corpus.animated_gif(3), corpus.animated_webp(3)):
        page = only_page(data)
        assert page.total == 1
        assert min(page.image.getpixel((page.width // 2, page.height - 4))) > 200  # frame 1 is white, the rest black


def test_multipage_tiff_gives_its_first_page_only() -> None:
    page = only_page(corpus.multipage_tiff(3))
    assert min(page.image.getpixel((page.width // 2, page.height - 4))) > 200


def test_a_large_photo_is_downscaled_to_the_max_side_and_the_budget() -> None:
    page = only_page(corpus.jpeg_bytes(4000, 3000))
    assert (page.source_width, page.source_height) == (4000, 3000)
    assert max(page.width, page.height) <= SETTINGS.max_side
    assert page.width % 32 == 0 and page.height % 32 == 0
    assert page.image_tokens <= BUDGET


def test_a_smaller_max_side_for_degraded_mode_is_honoured() -> None:
    pages = list(iter_pages(corpus.png_bytes(2000, 1000), SETTINGS, PROFILE, budget_tokens=BUDGET, max_side=1280))
    assert max(pages[0].width, pages[0].height) <= 1280


def test_a_three_page_pdf_renders_the_pages_of_the_range_in_order() -> None:
    data = corpus.pdf_bytes(3)
    pages = list(iter_pages(data, SETTINGS, PROFILE, budget_tokens=BUDGET, pages="3,1"))
    assert [p.number for p in pages] == [1, 3]
    assert all(p.total == 2 for p in pages)
    for page in pages:  # each page's background shade tells which page was rendered
        shade = page.image.getpixel((page.width // 2, page.height - 5))[0]
        assert abs(shade - corpus.page_shade(page.number)) <= 3


def test_a_letter_page_is_rendered_at_the_configured_dpi_then_fitted() -> None:
    page = only_page(corpus.pdf_bytes(1))
    assert (page.source_width, page.source_height) == (1275, 1650)  # 8.5 x 11 in at 150 dpi
    assert (page.width, page.height) == (1248, 1632)
    assert page.image_tokens <= BUDGET


def test_a_tight_budget_shrinks_the_page_instead_of_overflowing_the_context() -> None:
    page = only_page(corpus.pdf_bytes(1), budget_tokens=1000)
    assert page.image_tokens <= 1000
    assert page.width < 1248


def test_open_document_counts_a_thousand_page_pdf_and_applies_the_range() -> None:
    doc = open_document(corpus.blank_pdf(1200), SETTINGS, pages="1-3,1190-")
    assert doc == Document("pdf", 1200, (1, 2, 3, *range(1190, 1201)))


def test_a_page_range_picks_pages_of_a_thousand_page_pdf() -> None:
    pages = list(iter_pages(corpus.blank_pdf(1000), SETTINGS, PROFILE, budget_tokens=BUDGET, pages="999-"))
    assert [p.number for p in pages] == [999, 1000]
    assert pages[0].image.getpixel((10, 10)) == (255, 255, 255)


def test_an_encrypted_pdf_with_an_empty_user_password_opens_like_any_other() -> None:
    page = only_page(corpus.encrypted_pdf(user_password=""))
    assert page.image.getpixel((page.width // 2, page.height // 2))[0] < 60  # the black square


def test_the_hand_made_encrypted_pdf_is_real_it_opens_with_its_password() -> None:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(corpus.encrypted_pdf(user_password="secret"), password="secret")
    image = doc[0].render(scale=1).to_pil()
    assert image.getpixel((100, 100))[:3] == (0, 0, 0)
    doc.close()


def test_rendering_a_page_outside_the_selection_is_refused() -> None:
    data = corpus.pdf_bytes(3)
    doc = open_document(data, SETTINGS, pages="1")
    with pytest.raises(errors.InvalidPageRange):
        render_page(data, doc, 2, SETTINGS, PROFILE, budget_tokens=BUDGET)


def test_an_image_accepts_page_one_and_refuses_page_two() -> None:
    data = corpus.png_bytes(100, 100)
    assert open_document(data, SETTINGS, pages="1").selected == (1,)
    with pytest.raises(errors.InvalidPageRange, match="1 page\\."):
        open_document(data, SETTINGS, pages="2")


def test_pdf_pages_are_checked_for_aspect_ratio_like_images() -> None:
    data = corpus.blank_pdf(1, size_pt=(72 * 150, 36))  # 150 in x 0.5 in: 300:1
    with pytest.raises(errors.AspectRatioOutOfRange, match="Page 1"):
        list(iter_pages(data, SETTINGS, PROFILE, budget_tokens=BUDGET))


def test_a_thousand_page_pdf_renders_only_the_selected_page() -> None:
    # The page is rendered straight to the size sent: no full-resolution bitmap in between.
    data = corpus.blank_pdf(1000, size_pt=(14000, 14000))  # ~194 in square: allowed, huge at 150 dpi
    doc = open_document(data, SETTINGS, pages="500")
    page = render_page(data, doc, 500, SETTINGS, PROFILE, budget_tokens=BUDGET)
    assert (page.source_width, page.source_height) == (29167, 29167)
    assert page.width == page.height <= 2048


@pytest.mark.timeout(60)
def test_pdf_pages_render_correctly_from_many_threads_at_once() -> None:
    # The app renders from worker threads; PDFium itself is not thread-safe, so pdf_pages serialises calls.
    from concurrent.futures import ThreadPoolExecutor

    data = corpus.pdf_bytes(5)
    doc = open_document(data, SETTINGS)

    def shade(number: int) -> int:
        page = render_page(data, doc, number, SETTINGS, PROFILE, budget_tokens=1500)
        return page.image.getpixel((page.width // 2, page.height - 5))[0]

    numbers = [1 + i % 5 for i in range(40)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        shades = list(pool.map(shade, numbers))
    assert all(abs(s - corpus.page_shade(n)) <= 3 for s, n in zip(shades, numbers, strict=True))
