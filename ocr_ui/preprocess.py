"""Uploaded bytes to pages: sniff the type, check sizes before decoding, fit the token budget, encode.

The type comes from the content (magic bytes), never from a file name. ``open_document`` is cheap: it
reads headers and counts PDF pages without rendering, so a thousand-page PDF is refused or accepted at
once. ``render_page`` decodes or renders one page straight to the size that is sent: a multiple of 32
on both sides, within the token budget, so the model's processor has nothing left to resize. A JPEG
that already fits, upright and plain RGB or grey, is still decoded but sent as its own bytes.

``python -m ocr_ui.preprocess FILE [--pages 1-3] [--config PATH]`` prints one JSON line per page.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import NoReturn

from PIL import Image

from ocr_ui import image_pages, pdf_pages
from ocr_ui.config import ImageSettings
from ocr_ui.errors import (
    EmptyFile,
    InputError,
    InvalidOptions,
    InvalidPageRange,
    OcrError,
    TooManyPages,
    UnsupportedFileType,
)
from ocr_ui.profiles import FACTOR, ModelProfile, image_tokens

SUPPORTED = "PNG, JPEG, WebP, BMP, TIFF or GIF image, or a PDF"
# Chat-template tokens around the prompt (role markers, image begin/end, generation prompt): HunyuanOCR's
# template adds about 20; 64 leaves room for a template change without a context overflow.
TEMPLATE_TOKENS = 64
_BMP_HEADER_SIZES = {12, 16, 40, 52, 56, 64, 108, 124}  # the DIB header sizes Windows and OS/2 define


@dataclass(frozen=True)
class Document:
    """A sniffed and size-checked upload; nothing rendered yet."""

    kind: str  # "png" | "jpeg" | "webp" | "bmp" | "tiff" | "gif" | "pdf"
    page_count: int  # pages in the file (1 for images: GIF/TIFF/WebP contribute their first frame)
    selected: tuple[int, ...]  # 1-based page numbers to process


@dataclass(frozen=True)
class Page:
    """One page as it is sent to the engine."""

    number: int  # 1-based page number in the file
    total: int  # pages selected
    width: int  # size sent to the engine
    height: int
    source_width: int  # the image's own (displayed) size, or the PDF page's size at images.pdf_dpi
    source_height: int
    image_tokens: int  # profiles.image_tokens(width, height, profile)
    data_url: str  # "data:image/jpeg;base64,..." (never a path or file:// URL); maybe the upload's own JPEG
    load_image: Callable[[], Image.Image] = field(repr=False, compare=False)  # see ``image``

    @cached_property
    def image(self) -> Image.Image:
        """The RGB image sent (previews, drawing boxes); a JPEG sent as is is decoded on first use only."""
        return self.load_image()


def sniff(data: bytes) -> str:
    """The file's kind from its first bytes; ``UnsupportedFileType`` names what is accepted."""
    head = data[:32]
    if not data:
        raise EmptyFile("The file is empty (0 bytes).")
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head.startswith((b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")):
        return "tiff"
    if head.startswith(b"BM") and len(head) >= 18 and int.from_bytes(head[14:18], "little") in _BMP_HEADER_SIZES:
        return "bmp"
    if b"%PDF-" in data[:1024]:  # the PDF standard lets readers accept junk before the header
        return "pdf"
    raise UnsupportedFileType(f"{_looks_like(data)}Upload a {SUPPORTED}.")


def _looks_like(data: bytes) -> str:
    head = data[:2048].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if b"<svg" in head:
        return "SVG drawings are not supported: export the drawing as PNG. "
    if head.startswith((b"<!doctype html", b"<html")) or b"<body" in head:
        return "Web pages (HTML) are not supported: save a screenshot or print to PDF. "
    if head.startswith(b"pk\x03\x04"):
        return "ZIP archives and Office documents are not supported: export the pages as PDF. "
    if head[4:12] in (b"ftypheic", b"ftypheix", b"ftypmif1", b"ftyphevc"):
        return "HEIC photos are not supported: save the photo as JPEG. "
    try:
        data[:4096].decode("utf-8")
    except UnicodeDecodeError:
        return "This file type is not supported. "
    return "Text files are not supported: this tool reads images and PDFs. "


def parse_page_range(text: str | None, page_count: int, max_pages: int) -> tuple[int, ...]:
    """1-based pages selected by a range like "1-3,5,9-"; None or blank selects all (up to max_pages)."""
    if text is None or not text.strip():
        if page_count > max_pages:
            raise TooManyPages(f"The document has {page_count} pages; at most {max_pages} are read per request. "
                               f'Give a page range such as "1-{max_pages}".')
        return tuple(range(1, page_count + 1))
    shown = text.strip()[:40]
    if len(text) > 1000:
        raise InvalidPageRange("The page range is too long; use ranges such as \"1-3,5,9-\".")
    spans: list[tuple[int, int]] = []
    for part in (p.strip() for p in re.split(r"[,;]", text)):
        if not part:
            continue
        match = re.fullmatch(r"(\d{1,9})?\s*(-)?\s*(\d{1,9})?", part)
        if not match or not (match.group(1) or match.group(3)) or (match.group(2) is None and match.group(3)):
            raise InvalidPageRange(f'The page range "{shown}" is not understood: use page numbers and ranges '
                                   'such as "1-3,5,9-".')
        first = int(match.group(1) or 1)
        last = first if match.group(2) is None else int(match.group(3) or page_count)
        if first < 1:
            raise InvalidPageRange("Page numbers start at 1.")
        if last < first:
            raise InvalidPageRange(f'The range "{part}" runs backwards; write "{last}-{first}".')
        if last > page_count:
            raise InvalidPageRange(f"Page {last} does not exist: the document has {page_count} "
                                   f"page{'s' if page_count != 1 else ''}.")
        spans.append((first, last))
    if not spans:
        raise InvalidPageRange("The page range selects no pages.")
    merged: list[tuple[int, int]] = []  # merged before counting: a hostile range never materialises
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    count = sum(last - first + 1 for first, last in merged)
    if count > max_pages:
        raise TooManyPages(f"The page range selects {count} pages; at most {max_pages} are read per request. "
                           f'Narrow it, for example "{merged[0][0]}-{merged[0][0] + max_pages - 1}".')
    return tuple(n for first, last in merged for n in range(first, last + 1))


def token_budget(max_model_len: int, prompt: str, max_tokens: int) -> int:
    """Image tokens that still fit the context after the prompt and the answer.

    The prompt is not tokenized here (no tokenizer in the app). Its cost is over-estimated as one token
    per two UTF-8 bytes: English runs ~4 bytes per token and Chinese ~3-6 (3 bytes a character, 1-2
    characters a token), so bytes // 2 stays above the real count for natural text. ``TEMPLATE_TOKENS``
    covers the chat template. May be negative; ``fit_size`` then explains what to change.
    """
    return max_model_len - (len(prompt.encode("utf-8")) // 2 + TEMPLATE_TOKENS) - max_tokens


def fit_size(width: int, height: int, *, budget_tokens: int, max_side: int,
             profile: ModelProfile) -> tuple[int, int]:
    """The largest size, multiples of 32 on both sides and never above the source, that fits every limit.

    Limits: image tokens <= budget_tokens, longest side <= max_side, pixels <= the profile's max_pixels
    (so the processor keeps the size). A page below the profile's min_pixels is left for the processor
    to upscale; ``image_tokens`` already counts that.
    """
    max_side = max(FACTOR, max_side // FACTOR * FACTOR)

    def size_at(scale: float) -> tuple[int, int]:
        return (max(FACTOR, math.floor(width * scale / FACTOR) * FACTOR),
                max(FACTOR, math.floor(height * scale / FACTOR) * FACTOR))

    def fits(size: tuple[int, int]) -> bool:
        w, h = size
        return max(w, h) <= max_side and w * h <= profile.max_pixels and image_tokens(w, h, profile) <= budget_tokens

    if fits(size_at(1.0)):
        return size_at(1.0)
    smallest = size_at(0.0)
    if not fits(smallest):
        need = image_tokens(*smallest, profile)
        raise InvalidOptions(f"Only {max(budget_tokens, 0)} tokens are left for the image after the prompt and "
                             f"max_tokens, but even the smallest page needs {need}. Lower max_tokens, shorten the "
                             "prompt, or raise engine.max_model_len.")
    low, high = 0.0, 1.0  # fits(size_at(low)) holds, fits(size_at(high)) does not
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if fits(size_at(mid)) else (low, mid)
    return size_at(low)


def open_document(data: bytes, settings: ImageSettings, *, pages: str | None = None) -> Document:
    """Sniff the type, check the declared size or count the pages, apply the page range; renders nothing."""
    kind = sniff(data)
    if kind == "pdf":
        count = pdf_pages.page_count(data)
        return Document(kind, count, parse_page_range(pages, count, settings.max_pages))
    width, height = image_pages.oriented_size(image_pages.open_header(data, kind))
    _check(settings, "The image", width, height)
    return Document(kind, 1, parse_page_range(pages, 1, settings.max_pages))


def _check(settings: ImageSettings, what: str, width: int, height: int, *, decoded: bool = True) -> None:
    # A PDF page is rendered straight to the size sent, never at full size: its bound is max_pdf_page_inches.
    max_pixels = settings.max_decoded_pixels if decoded else width * height
    image_pages.check_dimensions(what, width, height, max_pixels=max_pixels,
                                 min_side=settings.min_side, max_aspect_ratio=settings.max_aspect_ratio)


def render_page(data: bytes, doc: Document, number: int, settings: ImageSettings, profile: ModelProfile,
                *, budget_tokens: int, max_side: int | None = None) -> Page:
    """Decode or render page ``number`` (1-based, one of ``doc.selected``) at the size that is sent."""
    if number not in doc.selected:
        raise InvalidPageRange(f"Page {number} is not among the selected pages.")
    side = _side(settings, max_side)
    if doc.kind == "pdf":
        dots = settings.pdf_dpi / pdf_pages.POINTS_PER_INCH

        def fit(w_pt: float, h_pt: float) -> tuple[int, int]:  # runs inside the render, the document opened once
            pdf_pages.check_page_inches(number, w_pt, h_pt, settings.max_pdf_page_inches)
            at_dpi = (max(1, round(w_pt * dots)), max(1, round(h_pt * dots)))
            _check(settings, f"Page {number}", *at_dpi, decoded=False)
            return fit_size(*at_dpi, budget_tokens=budget_tokens, max_side=side, profile=profile)

        (w_pt, h_pt), image = pdf_pages.render_page_fitted(data, number, fit)
        source = (max(1, round(w_pt * dots)), max(1, round(h_pt * dots)))
        return _page(doc, number, source, image.size, profile, encode_data_url(image, settings), partial(_same, image))
    header, source, size = _fit_image(data, doc.kind, settings, profile, budget_tokens, side)
    if _sent_as_is(data, doc.kind, settings, header, source, size):
        return _forwarded(data, doc, number, source, profile)
    image = image_pages.decode_rgb(data, doc.kind, draft_size=size)
    if image.size != size:
        image = image.resize(size, Image.Resampling.LANCZOS)
    return _page(doc, number, source, size, profile, encode_data_url(image, settings), partial(_same, image))


def forwarded_page(data: bytes, doc: Document, number: int, settings: ImageSettings, profile: ModelProfile,
                   *, budget_tokens: int, max_side: int | None = None) -> Page | None:
    """``render_page``'s page when it is a JPEG sent as it came, else None (nothing decoded then).

    That page is ~1 ms of work (a header, a 1/8-scale decode, base64): cheaper to make in place than
    to hand to a thread that must win the GIL back.
    """
    if doc.kind != "jpeg" or settings.encode_format != "jpeg" or number not in doc.selected:
        return None
    header, source, size = _fit_image(data, doc.kind, settings, profile, budget_tokens, _side(settings, max_side))
    if not _sent_as_is(data, doc.kind, settings, header, source, size):
        return None
    return _forwarded(data, doc, number, source, profile)


_Size = tuple[int, int]


def _side(settings: ImageSettings, max_side: int | None) -> int:
    return min(max_side or settings.max_side, settings.max_side)


def _fit_image(data: bytes, kind: str, settings: ImageSettings, profile: ModelProfile, budget_tokens: int,
               side: int) -> tuple[Image.Image, _Size, _Size]:
    """An image file's header, its (displayed) size and the size it is sent at; nothing decoded yet."""
    header = image_pages.open_header(data, kind)
    source = image_pages.oriented_size(header)
    _check(settings, "The image", *source)
    return header, source, fit_size(*source, budget_tokens=budget_tokens, max_side=side, profile=profile)


def _sent_as_is(data: bytes, kind: str, settings: ImageSettings, header: Image.Image, source: _Size,
                size: _Size) -> bool:
    # A JPEG already at the size sent goes as it came; size == source, not the decoded size, which a
    # draft decode at 1/2, 1/4 or 1/8 scale can also bring to the size sent.
    return (kind == "jpeg" and settings.encode_format == "jpeg" and size == source
            and image_pages.sendable_as_is(header, len(data)))


def _forwarded(data: bytes, doc: Document, number: int, source: _Size, profile: ModelProfile) -> Page:
    # Checked even when sent as is: a damaged file fails here, in our words, not at the engine. The
    # API path never looks at the pixels, so the full decode waits for whoever asks for page.image.
    image_pages.check_decodes(data, doc.kind)
    return _page(doc, number, source, source, profile, _data_url("image/jpeg", data),
                 partial(image_pages.decode_rgb, data, doc.kind))


def _page(doc: Document, number: int, source: _Size, size: _Size, profile: ModelProfile, data_url: str,
          load: Callable[[], Image.Image]) -> Page:
    return Page(number=number, total=len(doc.selected), width=size[0], height=size[1],
                source_width=source[0], source_height=source[1], image_tokens=image_tokens(*size, profile),
                data_url=data_url, load_image=load)


def _same(image: Image.Image) -> Image.Image:
    return image


def iter_pages(data: bytes, settings: ImageSettings, profile: ModelProfile, *, budget_tokens: int,
               pages: str | None = None, max_side: int | None = None) -> Iterator[Page]:
    """``open_document`` then ``render_page`` for each selected page, one at a time."""
    doc = open_document(data, settings, pages=pages)
    for number in doc.selected:
        yield render_page(data, doc, number, settings, profile, budget_tokens=budget_tokens, max_side=max_side)


def encode_data_url(image: Image.Image, settings: ImageSettings) -> str:
    """The image as a base64 data URL in images.encode_format."""
    buffer = io.BytesIO()
    if settings.encode_format == "jpeg":
        # 4:4:4 chroma (subsampling=0): coloured text on coloured ground stays sharp at a small size cost.
        image.save(buffer, "JPEG", quality=settings.jpeg_quality, subsampling=0)
        mime = "image/jpeg"
    else:
        image.save(buffer, "PNG", compress_level=3)  # speed over the last percent of size
        mime = "image/png"
    return _data_url(mime, buffer.getvalue())


def _data_url(mime: str, raw: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}"


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # the CLI contract: exit 2 with one "error:" line
        self.exit(2, f"error: {message}\n")


def main(argv: list[str] | None = None) -> int:
    """``python -m ocr_ui.preprocess FILE [--pages 1-3] [--config PATH]``: one JSON line per page."""
    from ocr_ui.config import load_from_process
    from ocr_ui.profiles import get_profile
    from ocr_ui.prompts import get_preset

    parser = _OneLineParser(prog="python -m ocr_ui.preprocess", description=main.__doc__)
    parser.add_argument("file", help="an image or PDF")
    parser.add_argument("--pages", default=None, help='page range such as "1-3,5,9-" (PDFs)')
    parser.add_argument("--config", default=None, help="config file (default: $OCR_UI_CONFIG or config.yaml)")
    args = parser.parse_args(argv)
    try:
        settings = load_from_process(args.config)
        profile = get_profile(settings.model.profile)
        prompt = get_preset(profile.name, "text").template  # the default preset
        budget = token_budget(settings.engine.max_model_len, prompt, settings.generation.max_tokens_cap)
        try:
            with open(args.file, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise InputError(f"cannot read {Path(args.file).name}: {exc.strerror or 'unreadable'}") from exc
        for page in iter_pages(data, settings.images, profile, budget_tokens=budget, pages=args.pages):
            print(json.dumps({"page": page.number, "width": page.width, "height": page.height,
                              "image_tokens": page.image_tokens}), flush=True)
    except OcrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
