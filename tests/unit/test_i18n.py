"""Interface texts: both languages complete, and the browser's language chosen the way browsers mean it."""

from __future__ import annotations

import string

import pytest

from ocr_ui.i18n import TEXTS, pick_language, t


def test_both_languages_have_the_same_keys_and_placeholders() -> None:
    assert TEXTS["en"].keys() == TEXTS["zh"].keys()
    fields = string.Formatter()
    for key, english in TEXTS["en"].items():
        names_en = {f[1] for f in fields.parse(english) if f[1]}
        names_zh = {f[1] for f in fields.parse(TEXTS["zh"][key]) if f[1]}
        assert names_en == names_zh, key


@pytest.mark.parametrize(("configured", "header", "expected"), [
    ("auto", "zh-CN,zh;q=0.9,en;q=0.8", "zh"),
    ("auto", "en-US,en;q=0.9,zh-CN;q=0.8", "en"),
    ("auto", "de-DE,de;q=0.9,zh-TW;q=0.5", "zh"),
    ("auto", "fr-FR, en;q=0.3, zh;q=0.7", "zh"),
    ("auto", "zh;q=0, en;q=0.1", "en"),
    ("auto", "", "en"),
    ("auto", None, "en"),
    ("auto", "garbage;;q=x", "en"),
    ("zh", "en-US", "zh"),
    ("en", "zh-CN", "en"),
])
def test_the_interface_language_follows_config_then_the_browser(configured: str, header: str | None,
                                                                 expected: str) -> None:
    assert pick_language(configured, header) == expected


def test_texts_are_formatted_and_unknown_languages_fall_back_to_english() -> None:
    assert t("zh", "page_of", i=2, n=5) == "第 2 页，共 5 页"
    assert t("fr", "page_of", i=2, n=5) == "Page 2 of 5"
