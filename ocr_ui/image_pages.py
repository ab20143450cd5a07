"""Raster images through Pillow: read the header safely, decode the first frame, make it plain RGB.

Pillow's decoders raise a wide, undocumented set of exception types on malformed input (OSError,
ValueError, SyntaxError, EOFError, struct.error, IndexError, ZeroDivisionError...). They are translated
here, in one place, into ``CorruptFile`` / ``ImageTooLarge``; nothing else from Pillow reaches a caller.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TypeVar

from PIL import Image, ImageOps

from ocr_ui.errors import AspectRatioOutOfRange, CorruptFile, ImageTooLarge, ImageTooSmall, OcrError

T = TypeVar("T")

# The Pillow plugin for each sniffed kind: a file is decoded only by the plugin its magic bytes chose.
PIL_FORMATS = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP", "bmp": "BMP", "tiff": "TIFF", "gif": "GIF"}
_SIXTEEN_BIT = {"I;16", "I;16L", "I;16B", "I;16N"}
_WITH_ALPHA = {"RGBA", "RGBa", "LA", "La", "PA"}
_SWAPPING_ORIENTATIONS = {5, 6, 7, 8}  # EXIF orientations that rotate by 90 degrees


def _translated(kind: str, work: Callable[[], T]) -> T:
    """Run a Pillow step; its errors become InputErrors that name the file type, never a path."""
    try:
        return work()
    except OcrError:
        raise
    except Image.DecompressionBombError as exc:
        # Pillow's own global limit (Image.MAX_IMAGE_PIXELS, left untouched) as a backstop to ours.
        limit = 2 * (Image.MAX_IMAGE_PIXELS or 0) / 1e6
        raise ImageTooLarge(f"The image declares more than {limit:.0f} megapixels, more than can be decoded "
                            "safely. Scale it down and upload it again.") from exc
    except MemoryError as exc:
        raise ImageTooLarge("The image is too large to decode in the memory available.") from exc
    except Exception as exc:  # see the module docstring: Pillow's error types are not a closed set
        raise CorruptFile(f"The {kind.upper()} file is damaged or incomplete and cannot be read.") from exc


def open_header(data: bytes, kind: str) -> Image.Image:
    """The image with only its header read (no pixel data decoded yet)."""

    # Pillow may warn (DecompressionBombWarning) between its own soft and hard limits; the warning is
    # left alone because silencing it would change the process-wide warning filters from any thread.
    return _translated(kind, lambda: Image.open(io.BytesIO(data), formats=[PIL_FORMATS[kind]]))


def orientation(image: Image.Image) -> int:
    """The EXIF orientation tag (1 when absent or unreadable: a broken EXIF block must not cost the page)."""
    try:
        value = image.getexif().get(0x0112, 1)
    except Exception:  # a damaged EXIF block is metadata noise, the pixels may still be fine
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def oriented_size(image: Image.Image) -> tuple[int, int]:
    """(width, height) as the image is displayed, after its EXIF rotation."""
    w, h = image.size
    return (h, w) if orientation(image) in _SWAPPING_ORIENTATIONS else (w, h)


def check_decodes(data: bytes, kind: str) -> None:
    """Decode every byte of the file at the smallest scale the format allows (JPEG: 1/8 size).

    A damaged or truncated file fails here with the app's own message instead of at the engine, for
    a fraction of a full decode (libjpeg still reads all the coded data at 1/8, it skips most IDCT work).
    """

    def work() -> None:
        image = open_header(data, kind)
        if kind == "jpeg":
            image.draft(image.mode, (max(1, image.width // 8), max(1, image.height // 8)))
        image.load()

    _translated(kind, work)


def sendable_as_is(header: Image.Image, file_size: int) -> bool:
    """Whether a JPEG's own bytes can be sent unchanged: upright, plain RGB or grey, nothing much besides pixels.

    Forwarding such a file skips a re-encode (CPU on the request path) and a second generation of JPEG loss.
    """
    # Above one byte a pixel (document JPEGs run ~0.1-0.5) the file carries a large payload besides its
    # pixels (EXIF thumbnails, ICC, data after the image, a second MPO picture): re-encoding sends the
    # page alone instead of forwarding megabytes the engine would only parse or discard.
    if header.format != "JPEG" or header.mode not in {"RGB", "L"} or "transparency" in header.info:
        return False  # MPO, CMYK/YCCK: re-encoded from the pixels decode_rgb made
    if file_size > header.width * header.height:
        return False
    try:
        return header.getexif().get(0x0112, 1) == 1
    except Exception:  # unreadable EXIF: re-encoding drops it rather than leave the engine to read it
        return False


def check_dimensions(what: str, width: int, height: int, *, max_pixels: int, min_side: int,
                     max_aspect_ratio: float) -> None:
    """Refuse sizes the pipeline cannot use, from the header alone (before any pixel is decoded)."""
    if width * height > max_pixels:
        raise ImageTooLarge(f"{what} is {width} x {height} pixels ({width * height / 1e6:.0f} megapixels); at most "
                            f"{max_pixels / 1e6:.0f} megapixels are accepted. Scale it down and upload it again.")
    if min(width, height) < min_side:
        raise ImageTooSmall(f"{what} is {width} x {height} pixels; its shorter side must be at least {min_side} "
                            "pixels to carry readable text.")
    ratio = max(width, height) / max(min(width, height), 1)
    if ratio > max_aspect_ratio:
        raise AspectRatioOutOfRange(f"{what} is {width} x {height} pixels, an aspect ratio of {ratio:.0f}:1; at most "
                                    f"{max_aspect_ratio:g}:1 is accepted. Crop it into shorter pieces.")


def decode_rgb(data: bytes, kind: str, *, draft_size: tuple[int, int] | None = None) -> Image.Image:
    """The first frame, decoded, EXIF-rotated and flattened to RGB on white.

    ``draft_size`` (displayed orientation) lets a JPEG decode at 1/2, 1/4 or 1/8 scale when that is
    still at least the size that will be sent: big phone photos decode several times faster.
    """

    def work() -> Image.Image:
        image = open_header(data, kind)
        image.seek(0)  # GIF, WebP and TIFF: the first frame / page only
        if draft_size is not None and kind == "jpeg":
            w, h = draft_size
            if orientation(image) in _SWAPPING_ORIENTATIONS:
                w, h = h, w
            image.draft(image.mode, (w, h))
        image.load()
        return to_rgb(_transposed(image))

    return _translated(kind, work)


def _transposed(image: Image.Image) -> Image.Image:
    try:
        return ImageOps.exif_transpose(image)
    except Exception:  # broken EXIF: keep the pixels as stored rather than refuse a readable page
        return image


def to_rgb(image: Image.Image) -> Image.Image:
    """Any Pillow mode to 8-bit RGB: 16/32-bit and float scaled (not clipped to white), alpha on white."""
    mode = image.mode
    if mode in _SIXTEEN_BIT or mode in {"I", "F"}:
        image, mode = _to_8bit_gray(image), "L"
    if mode == "1":
        image, mode = image.convert("L"), "L"
    has_alpha = mode in _WITH_ALPHA or "transparency" in image.info
    if has_alpha:
        rgba = image.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    return image if mode == "RGB" else image.convert("RGB")


def _to_8bit_gray(image: Image.Image) -> Image.Image:
    # A plain convert("L") clips 16-bit values to 255: a 16-bit scan would come out all white.
    wide = image if image.mode in {"I", "F"} else image.convert("I")
    extrema = wide.getextrema()  # single-band image: (min, max)
    lo, hi = float(extrema[0]), float(extrema[1])  # type: ignore[arg-type]
    if image.mode in _SIXTEEN_BIT or (lo >= 0 and 255 < hi <= 65535):
        scale, offset = 1 / 257, 0.0  # the full 16-bit range maps onto 0..255
    elif image.mode == "F" and lo >= 0 and hi <= 1.0:
        scale, offset = 255.0, 0.0  # float images are usually normalised to 0..1
    elif lo >= 0 and hi <= 255:
        scale, offset = 1.0, 0.0
    else:
        scale = 255.0 / (hi - lo) if hi > lo else 1.0
        offset = -lo * scale
    return wide.point(lambda v: v * scale + offset).convert("L")
