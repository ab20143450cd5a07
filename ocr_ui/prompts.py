"""Task presets with the official prompt strings, per model profile, and the chat messages they become.

Sources: HunyuanOCR 1.0's README prompt table and 1.5's ``inference/utils/tasks.py`` (fixed per task:
hand-tweaked wording was observed to degrade quality, so 1.5 gets no language hint appended).
``python -m ocr_ui.prompts list [--profile NAME]`` prints the presets.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

from ocr_ui.errors import InvalidOptions
from ocr_ui.profiles import ModelProfile, get_profile

Output = Literal["text", "markdown", "spotting", "json", "html", "latex"]
Need = Literal["fields", "target_language", "question"]

# Target languages a user can pick for photo translation: the model translates into these two.
TARGET_LANGUAGES = {"English": ("English", "英文"), "Chinese": ("Chinese", "中文")}


@dataclass(frozen=True)
class Preset:
    """One task: its prompt template, output kind, token budget and the extra inputs it needs."""

    key: str
    label: str
    label_zh: str
    template: str
    output: Output
    max_tokens: int
    needs: tuple[Need, ...] = ()


@dataclass(frozen=True)
class TaskOptions:
    """What the user typed besides the file: fields, target language, question, hint, prompt override."""

    fields: tuple[str, ...] = ()
    target_language: str = "English"
    question: str = ""
    language_hint: str = ""
    prompt_override: str = ""


_DOC_ZH = ("提取文档图片中正文的所有信息用markdown格式表示，其中页眉、页脚部分忽略，表格用html格式表达，"
           "文档中公式用latex格式表示，按照阅读顺序组织进行解析。")
_FIELDS_ZH = "提取图片中的: {fields} 的字段内容，并按照 JSON 格式返回。"

_V10 = (
    Preset("text", "Full text", "全文识别", "Extract the text in the image.", "text", 4096),
    Preset("markdown", "Document to Markdown", "文档转 Markdown",
           "Extract all information from the main body of the document image and represent it in markdown "
           "format, ignoring headers and footers. Tables should be expressed in HTML format, formulas in the "
           "document should be represented using LaTeX format, and the parsing should be organized according "
           "to the reading order.", "markdown", 4096),
    Preset("spotting", "Text spotting (boxes)", "文字检测（坐标）",
           "Detect and recognize text in the image, and output the text coordinates in a formatted manner.",
           "spotting", 4096),
    Preset("fields", "Extract fields to JSON", "字段抽取为 JSON",
           "Extract the content of the fields: {fields} from the image and return it in JSON format.",
           "json", 1024, ("fields",)),
    Preset("translate", "Photo translation", "拍照翻译",
           "First extract the text, then translate the text content into {target}. If it is a document, ignore "
           "the header and footer. Formulas should be represented in LaTeX format, and tables should be "
           "represented in HTML format.", "markdown", 4096, ("target_language",)),
    Preset("table", "Table to HTML", "表格转 HTML", "Parse the table in the image into HTML.", "html", 4096),
    Preset("formula", "Formula to LaTeX", "公式转 LaTeX",
           "Identify the formula in the image and represent it using LaTeX format.", "latex", 1024),
    Preset("chart", "Chart", "图表解析",
           "Parse the chart in the image; use Mermaid format for flowcharts and Markdown for other charts.",
           "markdown", 2048),
    Preset("subtitles", "Subtitles", "字幕提取", "Extract the subtitles from the image.", "text", 1024),
    Preset("question", "Free question", "自由提问", "{question}", "text", 1024, ("question",)),
)

_V15 = (
    Preset("text", "Full text", "全文识别", "提取图中的文字。", "text", 4096),
    Preset("markdown", "Document to Markdown", "文档转 Markdown", _DOC_ZH, "markdown", 4096),
    Preset("spotting", "Text spotting (boxes)", "文字检测（坐标）",
           "检测并识别图中所有的文字行，请按从上到下、从左到右的阅读顺序进行识别。 输出格式为 JSON 数组，每个元素必须包含："
           "\"box\": [xmin, ymin, xmax, ymax]（坐标需归一化到 [0, 1000] 范围内）；\"text\": \"识别出的文字内容\"。 "
           "注意：请直接输出 JSON 数组，不要包含任何多余的描述性文字。", "spotting", 4096),
    # 1.5 has no fixed field-extraction task; the 1.0 wording (same backbone) is the closest official one.
    Preset("fields", "Extract fields to JSON", "字段抽取为 JSON", _FIELDS_ZH, "json", 1024, ("fields",)),
    Preset("translate", "Photo translation", "拍照翻译",
           "按照阅读顺序，提取图中文字，公式用latex格式表示，表格用markdown格式表示，再将文字内容翻译为{target_zh}。",
           "markdown", 4096, ("target_language",)),
    Preset("table", "Table to HTML", "表格转 HTML", "把图中的表格解析为HTML。", "html", 4096),
    Preset("formula", "Formula to LaTeX", "公式转 LaTeX", "识别图片中的公式，用LaTeX格式表示。", "latex", 1024),
    Preset("chart", "Chart", "图表解析",
           "解析图中的图表，对于流程图使用Mermaid格式表示，其他图表使用Markdown格式表示。", "markdown", 2048),
    Preset("subtitles", "Subtitles", "字幕提取", "提取图片中的字幕。", "text", 1024),
    Preset("question", "Free question", "自由提问", "{question}", "text", 1024, ("question",)),
)

PRESETS: dict[str, dict[str, Preset]] = {
    "hunyuanocr-1.0": {p.key: p for p in _V10},
    "hunyuanocr-1.5": {p.key: p for p in _V15},
}


def presets_for(profile_name: str) -> dict[str, Preset]:
    """The presets of a profile, in display order."""
    return PRESETS[profile_name]


def get_preset(profile_name: str, key: str) -> Preset:
    """One preset; an unknown key is the user's mistake (API callers type it)."""
    try:
        return PRESETS[profile_name][key]
    except KeyError:
        known = ", ".join(PRESETS[profile_name])
        raise InvalidOptions(f"Unknown task '{key[:40]}'. Choose one of: {known}.") from None


def _clean(text: str) -> str:
    # Drop control characters (a pasted NUL or escape breaks nothing, but it reaches the model for nothing).
    return "".join(ch for ch in text if ch in "\n\t" or ch.isprintable()).strip()


def build_prompt(profile: ModelProfile, preset: Preset, options: TaskOptions, *, max_prompt_chars: int = 4000,
                 max_fields: int = 64) -> str:
    """The exact prompt text for this preset and options; ``InvalidOptions`` names what is missing."""
    if options.prompt_override.strip():
        prompt = _clean(options.prompt_override)
    else:
        values: dict[str, str] = {}
        if "fields" in preset.needs:
            fields = [_clean(f) for f in options.fields if _clean(f)]
            if not fields:
                raise InvalidOptions("Type at least one field name to extract, e.g. 'invoice number, total'.")
            if len(fields) > max_fields:
                raise InvalidOptions(f"Too many fields: {len(fields)}. At most {max_fields} per request.")
            values["fields"] = "[" + ", ".join("'" + f.replace("'", "’") + "'" for f in fields) + "]"
        if "target_language" in preset.needs:
            if options.target_language not in TARGET_LANGUAGES:
                raise InvalidOptions("The model translates into English or Chinese only. Pick one of those.")
            values["target"], values["target_zh"] = TARGET_LANGUAGES[options.target_language]
        if "question" in preset.needs:
            question = _clean(options.question)
            if not question:
                raise InvalidOptions("Type a question about the image.")
            values["question"] = question
        prompt = preset.template.format(**values)
        hint = _clean(options.language_hint)
        if hint and not profile.prompt_locked:
            prompt = f"{prompt} (The text is {hint}.)"
    if not prompt:
        raise InvalidOptions("The prompt is empty.")
    if len(prompt) > max_prompt_chars:
        raise InvalidOptions(f"The prompt is {len(prompt)} characters long; at most {max_prompt_chars} are allowed.")
    return prompt


def build_messages(profile: ModelProfile, prompt: str, data_url: str) -> list[dict[str, Any]]:
    """OpenAI chat messages: (empty system message for 1.0), then the image before the text."""
    messages: list[dict[str, Any]] = []
    if profile.send_system_message:
        messages.append({"role": "system", "content": ""})
    messages.append({"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url}},
        {"type": "text", "text": prompt},
    ]})
    return messages


def main(argv: list[str] | None = None) -> int:
    """``python -m ocr_ui.prompts list [--profile NAME]``."""
    import argparse

    from ocr_ui.config import load_from_process
    from ocr_ui.errors import ConfigError

    parser = argparse.ArgumentParser(prog="python -m ocr_ui.prompts")
    parser.add_argument("cmd", choices=["list"])
    parser.add_argument("--profile", default=None, help="profile name (default: model.profile from config)")
    args = parser.parse_args(argv)
    try:
        name = args.profile or load_from_process().model.profile
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if name not in PRESETS:
        print(f"error: unknown profile {name}; known: {', '.join(PRESETS)}", file=sys.stderr)
        return 2
    profile = get_profile(name)
    print(f"profile {name}: sampling {profile.sampling()}")
    for p in PRESETS[name].values():
        needs = f" (needs: {', '.join(p.needs)})" if p.needs else ""
        print(f"{p.key:10} {p.label} / {p.label_zh} -> {p.output}, max_tokens {p.max_tokens}{needs}\n    {p.template}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
