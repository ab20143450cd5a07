"""Realistic-looking document pages drawn with Pillow, for the load test and the preprocessing benchmark.

Each page has a title, a date line, paragraphs, a ruled table of figures and a footer, so its text
density is that of an invoice or a report page (the image-token count depends only on the size, but
JPEG size and decode time depend on the content). Pages are deterministic for a given seed.
"""

from __future__ import annotations

import io
import random

from PIL import Image, ImageDraw, ImageFilter, ImageFont

# Named sizes for the bench: a phone photo of a receipt, an A4 scan at 150 dpi, a large square scan.
SIZES: dict[str, tuple[int, int]] = {"small": (1024, 768), "a4": (1240, 1754), "big": (2048, 2048)}
A4_INCHES = (8.27, 11.69)

_WORDS = ("invoice total amount payable tax rate service period customer account number reference "
          "delivery address quantity unit price discount subtotal balance due date order item description "
          "shipping handling payment terms thirty days bank transfer contact department report summary "
          "quarterly revenue growth margin forecast region product sales volume annual").split()


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)  # Pillow's bundled scalable font: no system fonts needed


def _sentence(rng: random.Random, words: int) -> str:
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return text[0].upper() + text[1:] + "."


def draw_document(width: int, height: int, seed: int = 0) -> Image.Image:
    """A white RGB page of ``width`` x ``height`` pixels with text laid out like a business document."""
    rng = random.Random(seed)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    unit = max(10, min(width, height) // 60)  # body text height, scaled to the page
    margin = unit * 3
    title, body, small = _font(unit * 2), _font(unit), _font(max(8, unit * 3 // 4))
    y = margin
    draw.text((margin, y), f"INVOICE No. {rng.randint(10000, 99999)}", font=title, fill="black")
    y += unit * 3
    draw.text((margin, y), f"Date: 2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}   "
              f"Customer: ACME-{rng.randint(100, 999)}", font=body, fill=(40, 40, 40))
    y += unit * 2
    chars_per_line = max(20, (width - 2 * margin) // max(1, unit // 2))
    table_top = height * 45 // 100
    while y < table_top - unit * 2:
        line = _sentence(rng, 40)[:chars_per_line].rsplit(" ", 1)[0]  # cut at a word boundary
        draw.text((margin, y), line, font=body, fill="black")
        y += unit * 3 // 2
    # A ruled table: item, quantity, unit price, amount.
    cols = [margin, width * 45 // 100, width * 62 // 100, width * 80 // 100, width - margin]
    row_h = unit * 2
    rows = max(3, (height * 85 // 100 - table_top) // row_h - 1)
    for r in range(rows + 1):
        top = table_top + r * row_h
        draw.line([(cols[0], top), (cols[-1], top)], fill="black", width=max(1, unit // 10))
        if r == rows:
            break
        cells = ("Item", "Qty", "Unit price", "Amount") if r == 0 else (
            rng.choice(_WORDS).title() + " " + rng.choice(_WORDS), str(rng.randint(1, 99)),
            f"{rng.uniform(1, 500):.2f}", f"{rng.uniform(10, 9999):,.2f}")
        for c, text in enumerate(cells):
            draw.text((cols[c] + unit // 2, top + unit // 3), text, font=body, fill="black")
    for x in cols:
        draw.line([(x, table_top), (x, table_top + rows * row_h)], fill="black", width=max(1, unit // 10))
    draw.text((margin, height - margin), f"Page 1 of 1 · Total due {rng.uniform(100, 99999):,.2f} CNY",
              font=small, fill=(80, 80, 80))
    return image


def encode(image: Image.Image, fmt: str = "png", quality: int = 90) -> bytes:
    """The image as PNG or JPEG bytes."""
    buffer = io.BytesIO()
    if fmt == "jpeg":
        image.save(buffer, "JPEG", quality=quality)
    else:
        image.save(buffer, "PNG", compress_level=3)
    return buffer.getvalue()


def page_bytes(kind: str, seed: int = 0, fmt: str = "png") -> bytes:
    """A named page (``SIZES``) as image bytes; ``ValueError`` for an unknown name."""
    if kind not in SIZES:
        raise ValueError(f"unknown page size '{kind}'; choose from {', '.join(SIZES)}")
    return encode(draw_document(*SIZES[kind], seed=seed), fmt)


def photo_jpeg(width: int = 4000, height: int = 3000, seed: int = 0, quality: int = 90) -> bytes:
    """A phone-camera-like JPEG: a slightly rotated page on a noisy, uneven background."""
    background = Image.effect_noise((width, height), 40).convert("RGB")
    background = Image.blend(background, Image.new("RGB", (width, height), (120, 110, 95)), 0.6)
    page = draw_document(width * 7 // 10, height * 9 // 10, seed=seed).rotate(
        2.5, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=(120, 110, 95))
    background.paste(page, ((width - page.width) // 2, (height - page.height) // 2))
    return encode(background.filter(ImageFilter.GaussianBlur(0.8)), "jpeg", quality)


def a4_pdf(dpi: int = 200, pages: int = 1, seed: int = 0) -> bytes:
    """A scanned-style PDF: ``pages`` A4 pages, each an image at ``dpi``."""
    size = (round(A4_INCHES[0] * dpi), round(A4_INCHES[1] * dpi))
    images = [draw_document(*size, seed=seed + i) for i in range(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, "PDF", resolution=float(dpi), save_all=True, append_images=images[1:])
    return buffer.getvalue()
