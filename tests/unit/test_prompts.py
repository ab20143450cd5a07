"""Presets carry the official prompt strings and refuse incomplete options with clear messages."""

from __future__ import annotations

import pytest

from ocr_ui.errors import InvalidOptions
from ocr_ui.profiles import get_profile
from ocr_ui.prompts import PRESETS, TaskOptions, build_messages, build_prompt, get_preset, main

V10, V15 = get_profile("hunyuanocr-1.0"), get_profile("hunyuanocr-1.5")
EXPECTED_KEYS = ["text", "markdown", "spotting", "fields", "translate", "table", "formula", "chart", "subtitles", "question"]


@pytest.mark.parametrize("profile", ["hunyuanocr-1.0", "hunyuanocr-1.5"])
def test_both_profiles_offer_every_task(profile: str) -> None:
    assert list(PRESETS[profile]) == EXPECTED_KEYS


def test_official_1_0_strings_are_used_verbatim() -> None:
    assert build_prompt(V10, get_preset("hunyuanocr-1.0", "table"), TaskOptions()) == "Parse the table in the image into HTML."
    spot = build_prompt(V10, get_preset("hunyuanocr-1.0", "spotting"), TaskOptions())
    assert spot == "Detect and recognize text in the image, and output the text coordinates in a formatted manner."


def test_official_1_5_strings_are_used_verbatim() -> None:
    assert build_prompt(V15, get_preset("hunyuanocr-1.5", "formula"), TaskOptions()) == "识别图片中的公式，用LaTeX格式表示。"
    assert "\"box\": [xmin, ymin, xmax, ymax]" in build_prompt(V15, get_preset("hunyuanocr-1.5", "spotting"), TaskOptions())


def test_fields_become_the_official_list_syntax() -> None:
    p = build_prompt(V10, get_preset("hunyuanocr-1.0", "fields"), TaskOptions(fields=("总金额", "发票号码")))
    assert p == "Extract the content of the fields: ['总金额', '发票号码'] from the image and return it in JSON format."


def test_fields_preset_without_fields_says_what_to_type() -> None:
    with pytest.raises(InvalidOptions, match="field name"):
        build_prompt(V15, get_preset("hunyuanocr-1.5", "fields"), TaskOptions(fields=(" ", "")))


def test_too_many_fields_and_too_long_prompts_are_refused() -> None:
    with pytest.raises(InvalidOptions, match="Too many fields"):
        build_prompt(V10, get_preset("hunyuanocr-1.0", "fields"), TaskOptions(fields=tuple("abc")), max_fields=2)
    with pytest.raises(InvalidOptions, match="characters long"):
        build_prompt(V10, get_preset("hunyuanocr-1.0", "question"), TaskOptions(question="x" * 5000), max_prompt_chars=4000)


def test_translation_target_is_English_or_Chinese_only() -> None:
    p = build_prompt(V15, get_preset("hunyuanocr-1.5", "translate"), TaskOptions(target_language="Chinese"))
    assert p.endswith("再将文字内容翻译为中文。")
    with pytest.raises(InvalidOptions, match="English or Chinese"):
        build_prompt(V15, get_preset("hunyuanocr-1.5", "translate"), TaskOptions(target_language="Klingon"))


def test_language_hint_is_added_for_1_0_but_not_for_the_prompt_locked_1_5() -> None:
    opts = TaskOptions(language_hint="mainly Chinese, with Thai")
    assert "mainly Chinese, with Thai" in build_prompt(V10, get_preset("hunyuanocr-1.0", "text"), opts)
    assert build_prompt(V15, get_preset("hunyuanocr-1.5", "text"), opts) == "提取图中的文字。"


def test_edited_prompt_replaces_the_preset_and_control_characters_are_dropped() -> None:
    p = build_prompt(V15, get_preset("hunyuanocr-1.5", "text"), TaskOptions(prompt_override="Read\x00 this\x1b"))
    assert p == "Read this"


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(InvalidOptions, match="Choose one of: text, markdown"):
        get_preset("hunyuanocr-1.5", "poetry")


def test_messages_put_the_image_before_the_text_and_1_0_sends_an_empty_system_message() -> None:
    m10 = build_messages(V10, "p", "data:image/jpeg;base64,AAAA")
    assert m10[0] == {"role": "system", "content": ""}
    assert [c["type"] for c in m10[1]["content"]] == ["image_url", "text"]
    m15 = build_messages(V15, "p", "data:image/jpeg;base64,AAAA")
    assert m15[0]["role"] == "user"


def test_cli_lists_presets_of_a_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--profile", "hunyuanocr-1.0"]) == 0
    out = capsys.readouterr().out
    assert "spotting" in out and "Parse the table in the image into HTML." in out
