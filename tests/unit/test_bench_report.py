"""The load test's statistics, and the synthetic pages it sends."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from ocr_ui import synthetic_pages
from ocr_ui.bench_report import Record, percentile, summarize, summary_line


def test_percentiles_interpolate_between_samples() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([0.0, 10.0], 95) == pytest.approx(9.5)


def test_a_summary_counts_errors_by_kind_and_rates_only_successes() -> None:
    records = [Record("engine", 4, i, "a4", 0.0, latency_s=1.0 + i, ttft_s=0.1 * (i + 1), output_tokens=100)
               for i in range(3)]
    records.append(Record("engine", 4, 3, "a4", 0.0, error="engine_timeout"))
    s = summarize(records, 4, wall_s=2.0)
    assert (s["requests"], s["ok"], s["errors"], s["error_rate"]) == (4, 3, 1, 0.25)
    assert s["error_kinds"] == {"engine_timeout": 1}
    assert s["req_per_s"] == 1.5 and s["output_tok_per_s"] == 150.0
    assert s["latency_p50_ms"] == 2000.0 and s["ttft_p50_ms"] == 200.0
    assert s["queue_wait_p50_ms"] is None
    assert "3/4 ok" in summary_line(s) and "errors 25.0%" in summary_line(s)


def test_records_round_times_to_a_tenth_of_a_millisecond() -> None:
    rec = Record("app", 1, 0, "small", 0.123456789, latency_s=1.23456789)
    assert rec.as_dict()["latency_s"] == 1.2346 and rec.as_dict()["ttft_s"] is None


@pytest.mark.parametrize("kind", list(synthetic_pages.SIZES))
def test_synthetic_pages_have_their_named_size_and_are_deterministic(kind: str) -> None:
    data = synthetic_pages.page_bytes(kind, seed=3)
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == synthetic_pages.SIZES[kind] and image.format == "PNG"
        assert image.convert("L").getextrema()[0] < 64  # there is dark text on the page
    assert synthetic_pages.page_bytes(kind, seed=3) == data != synthetic_pages.page_bytes(kind, seed=4)


def test_an_unknown_page_name_is_refused() -> None:
    with pytest.raises(ValueError, match="choose from small, a4, big"):
        synthetic_pages.page_bytes("poster")


def test_the_a4_pdf_is_a_real_pdf_of_a4_pages() -> None:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(synthetic_pages.a4_pdf(dpi=72, pages=2))
    try:
        assert len(pdf) == 2
        width, height = pdf[0].get_size()
        assert width == pytest.approx(595, abs=2) and height == pytest.approx(842, abs=2)
    finally:
        pdf.close()
