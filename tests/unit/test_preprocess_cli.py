"""``python -m ocr_ui.preprocess``: one JSON line per page; bad input exits 2 with one ``error:`` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import corpus

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(60)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCR_UI")}  # the repo's config.yaml only
    return subprocess.run([sys.executable, "-m", "ocr_ui.preprocess", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def assert_one_error_line(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0]


def test_an_image_prints_one_json_line_with_its_size_and_tokens(tmp_path: Path) -> None:
    path = tmp_path / "photo.jpg"
    path.write_bytes(corpus.jpeg_bytes(3000, 2000))
    result = run_cli(str(path))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 1
    assert set(rows[0]) == {"page", "width", "height", "image_tokens"}
    assert rows[0]["page"] == 1 and rows[0]["width"] == 2048
    assert 0 < rows[0]["image_tokens"] <= 8192 - 4096


def test_a_pdf_with_a_page_range_prints_a_line_per_selected_page(tmp_path: Path) -> None:
    path = tmp_path / "doc.pdf"
    path.write_bytes(corpus.pdf_bytes(3))
    result = run_cli(str(path), "--pages", "2-")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["page"] for line in result.stdout.splitlines()] == [2, 3]


def test_a_renamed_text_file_exits_2_with_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "notes.png"
    path.write_text("not an image at all\n")
    assert_one_error_line(run_cli(str(path)), "Text files are not supported")


def test_a_missing_file_exits_2_with_one_error_line_naming_only_the_file(tmp_path: Path) -> None:
    result = run_cli(str(tmp_path / "absent.pdf"))
    assert_one_error_line(result, "cannot read absent.pdf")
    assert str(tmp_path) not in result.stderr


def test_a_bad_page_range_exits_2_with_one_error_line(tmp_path: Path) -> None:
    path = tmp_path / "doc.pdf"
    path.write_bytes(corpus.pdf_bytes(3))
    assert_one_error_line(run_cli(str(path), "--pages", "4"), "Page 4 does not exist")


def test_missing_arguments_exit_2_with_one_error_line() -> None:
    assert_one_error_line(run_cli(), "required")


def test_the_budget_comes_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "small.yaml"
    config.write_text("engine:\n  max_model_len: 4096\ngeneration:\n  max_tokens_cap: 3900\n")
    path = tmp_path / "page.png"
    path.write_bytes(corpus.png_bytes(2000, 2000))
    assert_one_error_line(run_cli(str(path), "--config", str(config)), "max_model_len")
