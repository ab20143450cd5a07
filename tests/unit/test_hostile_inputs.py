"""Hostile and broken uploads: each gets its own error class and a user-safe message, in bounded time.

The property tests feed random bytes and mutated valid files through the whole upload path: the only
acceptable outcomes are an ``InputError`` subclass or valid pages. They print how many examples ran.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFile

from ocr_ui import errors
from ocr_ui.config import ImageSettings
from ocr_ui.preprocess import SUPPORTED, Page, iter_pages, open_document
from ocr_ui.profiles import get_profile, image_tokens
from tests.support import corpus

SETTINGS = ImageSettings()
PROFILE = get_profile("hunyuanocr-1.5")
BUDGET = 4000
EXAMPLES = 1000
PATH_LIKE = re.compile(r"(?:/[\w.-]+){2,}|[A-Za-z]:\\|\\\\|file:")
# Bombs between Pillow's soft and hard limits make it warn before our own check refuses them; mutated
# files make its TIFF reader warn about the damage it then reports as an error.
pytestmark = [pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning"),
              pytest.mark.filterwarnings("ignore:Corrupt EXIF data:UserWarning"),
              pytest.mark.filterwarnings("ignore:Truncated File Read:UserWarning")]


def upload(data: bytes, pages: str | None = None, image_settings: ImageSettings = SETTINGS) -> list[Page]:
    return list(iter_pages(data, image_settings, PROFILE, budget_tokens=BUDGET, pages=pages))


def assert_valid(page: Page) -> None:
    assert page.width % 32 == 0 and page.height % 32 == 0
    assert page.image.mode == "RGB" and page.image.size == (page.width, page.height)
    assert page.image_tokens == image_tokens(page.width, page.height, PROFILE) <= BUDGET
    assert page.data_url.startswith("data:image/jpeg;base64,")


CASES = corpus.hostile_cases()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_hostile_input_gets_its_own_error_and_a_safe_message(case: corpus.Case) -> None:
    with pytest.raises(errors.InputError) as info:
        upload(case.data, case.pages)
    exc = info.value
    assert type(exc) is case.expected, f"{case.name}: {type(exc).__name__}: {exc}"
    message = str(exc)
    assert case.message_has in message
    assert exc.code == case.expected.code and exc.http_status in {400, 413, 415}
    assert not PATH_LIKE.search(message), message
    assert "Traceback" not in message and "\n" not in message and len(message) < 300


def test_the_hostile_corpus_covers_every_input_error_class_the_preprocessor_raises() -> None:
    covered = {case.expected for case in CASES}
    assert covered == {errors.EmptyFile, errors.UnsupportedFileType, errors.CorruptFile, errors.ImageTooLarge,
                       errors.ImageTooSmall, errors.AspectRatioOutOfRange, errors.EncryptedPdf,
                       errors.TooManyPages, errors.InvalidPageRange}


def test_every_unsupported_type_message_names_the_supported_types() -> None:
    for case in CASES:
        if case.expected is errors.UnsupportedFileType:
            with pytest.raises(errors.UnsupportedFileType, match=re.escape(SUPPORTED)):
                upload(case.data)


def test_a_decompression_bomb_is_refused_before_any_pixel_is_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_decoding(self: ImageFile.ImageFile) -> None:
        raise AssertionError("pixel data was decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    with pytest.raises(errors.ImageTooLarge, match="169 megapixels"):
        open_document(corpus.png_bomb(13_000, 13_000), SETTINGS)


def test_pillows_own_bomb_limit_is_a_backstop_when_the_configured_limit_is_higher() -> None:
    # Config bounds stop at 178 million; model_construct skips them to prove the backstop still holds.
    generous = ImageSettings.model_construct(**{**ImageSettings().model_dump(), "max_decoded_pixels": 2_000_000_000})
    with pytest.raises(errors.ImageTooLarge, match="megapixels"):
        upload(corpus.png_header_only(100_000, 100_000), image_settings=generous)
    assert Image.MAX_IMAGE_PIXELS == 89_478_485  # Pillow's global default, untouched by the preprocessor


def test_a_lower_configured_pixel_limit_is_applied_per_call() -> None:
    strict = ImageSettings(max_decoded_pixels=1_000_000)
    with pytest.raises(errors.ImageTooLarge, match="at most 1 megapixels"):
        upload(corpus.png_bytes(1200, 1000), image_settings=strict)
    assert len(upload(corpus.png_bytes(1200, 1000))) == 1  # the default settings still accept it


def test_the_same_thousand_page_pdf_is_accepted_with_a_page_range() -> None:
    pages = upload(corpus.blank_pdf(1000), pages="1-3")
    assert [p.number for p in pages] == [1, 2, 3]


# ------------------------------------------------------------------------------------- properties

SEEDS = {
    "png": corpus.png_bytes(96, 64),
    "jpeg": corpus.jpeg_bytes(96, 64, orientation=6),
    "gif": corpus.animated_gif(2, 64, 48),
    "webp": corpus.animated_webp(2, 64, 48),
    "bmp": corpus.image_bytes("BMP", 64, 48),
    "tiff": corpus.multipage_tiff(2, 64, 48),
    "pdf": corpus.pdf_bytes(2, size_in=(2.0, 1.5)),
    "encrypted_pdf": corpus.encrypted_pdf(),
}
MAGICS = [b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF89a", b"RIFF\x00\x00\x00\x00WEBP", b"II*\x00", b"MM\x00*",
          b"BM\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x28\x00\x00\x00", b"%PDF-1.7\n"]


@st.composite
def mutated_files(draw: st.DrawFn) -> bytes:
    """A valid seed file with a few byte flips, insertions, deletions or a truncation."""
    data = bytearray(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and data:
            data[at] = draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80]))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 64))]
        elif op == "truncate":
            del data[at:]
    return bytes(data)


random_bytes = st.one_of(st.binary(max_size=4096),
                         st.tuples(st.sampled_from(MAGICS), st.binary(max_size=2048)).map(lambda t: t[0] + t[1]))


def run_property(strategy: st.SearchStrategy[bytes]) -> tuple[int, int]:
    """Feed ``EXAMPLES`` uploads through the upload path; returns (examples tried, how many succeeded)."""
    tried, succeeded = [0], [0]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def check(data: bytes) -> None:
        tried[0] += 1
        try:
            pages = upload(data)
        except errors.InputError:
            return
        for page in pages:
            assert_valid(page)
        succeeded[0] += 1

    check()
    return tried[0], succeeded[0]


@pytest.mark.timeout(240)
def test_random_bytes_only_ever_raise_input_errors() -> None:
    tried, succeeded = run_property(random_bytes)
    print(f"random bytes: {tried} examples tried, {succeeded} decoded")
    assert tried >= EXAMPLES


@pytest.mark.timeout(240)
def test_mutated_valid_files_only_ever_raise_input_errors_or_give_valid_pages() -> None:
    tried, succeeded = run_property(mutated_files())
    print(f"mutated files: {tried} examples tried, {succeeded} decoded to valid pages")
    assert tried >= EXAMPLES
    assert succeeded > 0  # some mutations are harmless: the test really reaches the decoders
