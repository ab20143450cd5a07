"""Real test files made on the fly: images of every supported type, PDFs, and hostile or broken inputs.

Everything is generated (Pillow, pypdfium2, or written byte by byte where no library will do it, such
as an RC4-encrypted PDF or a PNG whose header lies), so no binary fixtures live in the repository.
Other tests reuse it: ``png_bytes(640, 480, text="Invoice")``, ``pdf_bytes(pages=3)``,
``hostile_cases()``.
"""

from __future__ import annotations

import hashlib
import io
import struct
import zlib
from dataclasses import dataclass, field

import pypdfium2 as pdfium
from PIL import Image, ImageDraw

from ocr_ui import errors

# ---------------------------------------------------------------------------------------- images


def drawn(width: int = 640, height: int = 480, *, text: str = "Hello OCR 123", mode: str = "RGB",
          background: int | tuple[int, ...] = 255) -> Image.Image:
    """A white image with dark text in the top-left corner and a black bar along the top edge."""
    image = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    if isinstance(background, int):
        background = (background,) * 3
    draw.rectangle((0, 0, width, height), fill=tuple(background))
    draw.rectangle((0, 0, width - 1, max(0, height // 20)), fill=(0, 0, 0))  # marks "up" for rotation tests
    if text:
        draw.text((max(1, width // 20), max(1, height // 10)), text, fill=(20, 20, 20))
    return image if mode == "RGB" else image.convert(mode)


def image_bytes(fmt: str, width: int = 640, height: int = 480, *, text: str = "Hello OCR 123", mode: str = "RGB",
                **save: object) -> bytes:
    """``drawn(...)`` saved as ``fmt`` (PNG, JPEG, WEBP, BMP, TIFF, GIF)."""
    buffer = io.BytesIO()
    drawn(width, height, text=text, mode=mode).save(buffer, fmt, **save)
    return buffer.getvalue()


def png_bytes(width: int = 640, height: int = 480, *, text: str = "Hello OCR 123", mode: str = "RGB") -> bytes:
    return image_bytes("PNG", width, height, text=text, mode=mode)


def jpeg_bytes(width: int = 640, height: int = 480, *, text: str = "Hello OCR 123", orientation: int | None = None,
               mode: str = "RGB") -> bytes:
    """A JPEG; ``orientation`` writes an EXIF Orientation tag (6 = stored sideways, display rotated 90° CW)."""
    image = drawn(width, height, text=text, mode=mode)
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90, exif=exif.tobytes())
    return buffer.getvalue()


def sixteen_bit_png(width: int = 64, height: int = 48, value: int = 40000) -> bytes:
    """A 16-bit grayscale PNG (mode I;16) of one grey level: converts to value/257, not to white."""
    buffer = io.BytesIO()
    Image.new("I;16", (width, height), value).save(buffer, "PNG")
    return buffer.getvalue()


def animated_gif(frames: int = 3, width: int = 120, height: int = 80) -> bytes:
    """An animated GIF whose first frame is white with black text and later frames are solid black."""
    first = drawn(width, height, text="frame 1").convert("P")
    rest = [Image.new("P", (width, height), 0) for _ in range(frames - 1)]
    buffer = io.BytesIO()
    first.save(buffer, "GIF", save_all=True, append_images=rest, duration=100, loop=0)
    return buffer.getvalue()


def animated_webp(frames: int = 3, width: int = 120, height: int = 80) -> bytes:
    """An animated WebP: first frame white with text, later ones solid black."""
    first = drawn(width, height, text="frame 1")
    rest = [Image.new("RGB", (width, height), (0, 0, 0)) for _ in range(frames - 1)]
    buffer = io.BytesIO()
    first.save(buffer, "WEBP", save_all=True, append_images=rest, duration=100, lossless=True)
    return buffer.getvalue()


def multipage_tiff(pages: int = 3, width: int = 120, height: int = 80) -> bytes:
    """A multi-page TIFF: first page white with text, later pages solid black."""
    first = drawn(width, height, text="page 1")
    rest = [Image.new("RGB", (width, height), (0, 0, 0)) for _ in range(pages - 1)]
    buffer = io.BytesIO()
    first.save(buffer, "TIFF", save_all=True, append_images=rest, compression="tiff_lzw")
    return buffer.getvalue()


# ------------------------------------------------------------------------------------------ PDFs


def page_shade(number: int) -> int:
    """The grey level of page ``number``'s background in ``pdf_bytes``: tells rendered pages apart."""
    return 255 - 40 * ((number - 1) % 5)


def pdf_bytes(pages: int = 3, *, size_in: tuple[float, float] = (8.5, 11.0), text: str = "Page {n}") -> bytes:
    """A PDF (saved by Pillow) whose page n has background ``page_shade(n)`` and the text 'Page n'."""
    dpi = 36  # small page bitmaps keep the file tiny; the page size in inches is what matters
    width, height = round(size_in[0] * dpi), round(size_in[1] * dpi)
    images = [drawn(width, height, text=text.format(n=n), background=page_shade(n)) for n in range(1, pages + 1)]
    buffer = io.BytesIO()
    images[0].save(buffer, "PDF", resolution=dpi, save_all=True, append_images=images[1:])
    return buffer.getvalue()


def blank_pdf(pages: int = 1000, *, size_pt: tuple[float, float] = (612.0, 792.0)) -> bytes:
    """A PDF of ``pages`` empty pages (pypdfium2); 1000 pages take ~10 ms and ~120 KB."""
    doc = pdfium.PdfDocument.new()
    for _ in range(pages):
        doc.new_page(*size_pt).close()
    buffer = io.BytesIO()
    doc.save(buffer)
    doc.close()
    return buffer.getvalue()


def wall_pdf(inches: float = 5000.0) -> bytes:
    """A one-page PDF whose MediaBox is ``inches`` square (a poster, or a hostile file)."""
    return blank_pdf(1, size_pt=(inches * 72, inches * 72))


_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")


def _rc4(key: bytes, data: bytes) -> bytes:
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out, i, j = bytearray(), 0, 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def encrypted_pdf(user_password: str = "secret", owner_password: str = "owner") -> bytes:
    """A one-page PDF encrypted with the standard security handler (RC4 40-bit, revision 2).

    Written by hand (PDF 1.7 spec, algorithms 2-4) because pdfium and Pillow cannot encrypt. The page
    draws a black square in the middle; opened with ``user_password`` it renders. An empty user password
    gives the common "owner-restricted" PDF that opens without asking.
    """
    def padded(password: str) -> bytes:
        return (password.encode("latin-1") + _PAD)[:32]

    perms = -44  # print and copy allowed; the value only enters the key derivation
    file_id = hashlib.md5(b"ocr-workbench test corpus").digest()
    owner = _rc4(hashlib.md5(padded(owner_password)).digest()[:5], padded(user_password))
    key = hashlib.md5(padded(user_password) + owner + struct.pack("<i", perms) + file_id).digest()[:5]
    user = _rc4(key, _PAD)
    content = b"0 0 0 rg 50 50 100 100 re f\n"
    object_key = hashlib.md5(key + (4).to_bytes(3, "little") + (0).to_bytes(2, "little")).digest()[:10]
    stream = _rc4(object_key, content)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R /Resources << >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P %d >>" % (owner.hex().encode(), user.hex().encode(), perms),
    ]
    return _assemble(objects, b"/Encrypt 5 0 R /ID [<%s><%s>]" % (file_id.hex().encode(), file_id.hex().encode()))


def _assemble(objects: list[bytes], trailer_extra: bytes = b"") -> bytes:
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R %s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer_extra, xref)
    return bytes(out)


# --------------------------------------------------------------------------------- hostile inputs


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header_only(width: int = 100_000, height: int = 100_000) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` pixels but carries (almost) no data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 64))
            + _png_chunk(b"IEND", b""))


def png_bomb(width: int = 13_000, height: int = 13_000) -> bytes:
    """A real, valid 1-bit PNG of ``width`` x ``height`` (169 megapixels by default) in ~20 KB: all zeros."""
    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte + packed bits
    packer = zlib.compressobj(9)
    body = bytearray()
    block = row * 256
    for _ in range(height // 256):
        body += packer.compress(block)
    body += packer.compress(row * (height % 256)) + packer.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", bytes(body)) + _png_chunk(b"IEND", b"")


def truncated(data: bytes, keep: float = 0.5) -> bytes:
    """The first ``keep`` share of ``data`` (an interrupted upload)."""
    return data[: max(1, int(len(data) * keep))]


@dataclass(frozen=True)
class Case:
    """A hostile or broken upload, the error it must produce, and a fragment its message must contain."""

    name: str
    data: bytes
    expected: type[errors.InputError]
    message_has: str = ""
    pages: str | None = None
    notes: str = field(default="", compare=False)


def hostile_cases() -> list[Case]:
    """Every broken or hostile upload the preprocessor must refuse, each with its own error class."""
    svg = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>'
    return [
        Case("zero_bytes", b"", errors.EmptyFile, "empty"),
        Case("text_renamed_png", b"Quarterly report\nTotal: 42\n", errors.UnsupportedFileType, "Text files"),
        Case("html_renamed_png", b"<!DOCTYPE html><html><body><script>alert(1)</script></body></html>",
             errors.UnsupportedFileType, "HTML"),
        Case("svg_renamed_png", svg, errors.UnsupportedFileType, "SVG"),
        Case("non_utf8_bytes", bytes(range(128, 256)) * 4, errors.UnsupportedFileType, "PNG, JPEG"),
        Case("zip_archive", b"PK\x03\x04" + b"\x00" * 60, errors.UnsupportedFileType, "ZIP"),
        Case("bm_text_is_not_bmp", b"BMW owners manual, chapter 1", errors.UnsupportedFileType, "Text files"),
        Case("truncated_png", truncated(png_bytes(400, 300)), errors.CorruptFile, "PNG"),
        Case("truncated_jpeg", truncated(jpeg_bytes(400, 300)), errors.CorruptFile, "JPEG"),
        Case("truncated_tiff", truncated(image_bytes("TIFF", 400, 300)), errors.CorruptFile, "TIFF"),
        Case("truncated_pdf", truncated(pdf_bytes(3), 0.1), errors.CorruptFile, "PDF"),
        Case("png_signature_only", b"\x89PNG\r\n\x1a\n", errors.CorruptFile, "PNG"),
        Case("gif_magic_then_junk", b"GIF89a" + b"\x01" * 40, errors.CorruptFile, "GIF"),
        Case("pdf_magic_then_junk", b"%PDF-1.7\n" + b"garbage " * 50, errors.CorruptFile, "PDF"),
        Case("pdf_without_pages", blank_pdf(0), errors.CorruptFile, "PDF"),
        Case("png_header_declares_100000x100000", png_header_only(), errors.ImageTooLarge, "pixels"),
        Case("png_bomb_169_megapixels", png_bomb(), errors.ImageTooLarge, "megapixels"),
        Case("one_by_one_pixel", png_bytes(1, 1, text=""), errors.ImageTooSmall, "1 x 1"),
        Case("sliver_30000x10", png_bytes(30000, 10, text=""), errors.AspectRatioOutOfRange, "3000:1"),
        Case("encrypted_pdf", encrypted_pdf(), errors.EncryptedPdf, "password"),
        Case("wall_sized_pdf_page", wall_pdf(5000), errors.ImageTooLarge, "5000 x 5000 inches"),
        Case("thousand_pages_without_range", blank_pdf(1000), errors.TooManyPages, "1000 pages"),
        Case("garbage_page_range", pdf_bytes(3), errors.InvalidPageRange, "not understood", pages="one to three"),
        Case("page_beyond_the_end", pdf_bytes(3), errors.InvalidPageRange, "does not exist", pages="2-7"),
        Case("range_larger_than_max_pages", blank_pdf(1000), errors.TooManyPages, "selects 500", pages="1-500"),
    ]
