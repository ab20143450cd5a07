"""Interface texts in English and Chinese, and the choice of language for a browser.

The interface language is independent of the OCR task's language: a Chinese interface can translate a
German menu into English. Error messages from ``ocr_ui.errors`` stay as they are (English, user-safe);
the words around them (labels, statuses, hints) come from here. No gradio import.
"""

from __future__ import annotations

Lang = str  # "en" | "zh"
LANGUAGES: tuple[Lang, ...] = ("en", "zh")

TEXTS: dict[Lang, dict[str, str]] = {
    "en": {
        "title": "# OCR workbench",
        "subtitle": "Upload images or PDFs, pick a task and watch the text arrive. Files stay on this server.",
        "ui_language": "Interface language",
        "files": "Images or PDFs",
        "preview": "Page preview",
        "preset": "Task",
        "preset_info": "What the model should do with each page.",
        "fields": "Fields to extract",
        "fields_info": "Comma-separated names, e.g. invoice number, date, total.",
        "target_language": "Translate into",
        "question": "Question about the image",
        "language_hint": "Language of the document (optional)",
        "language_hint_info": "A hint such as 'German'. The 1.5 model uses fixed prompts and ignores it.",
        "pages": "Pages (PDF)",
        "pages_info": "For example 1-3,7. Empty means all pages up to the limit.",
        "advanced": "Advanced: the exact prompt",
        "prompt": "Prompt sent to the model",
        "prompt_info": "Edit it to try another wording for this request. Empty means the task's own prompt.",
        "max_tokens": "Longest answer per page (tokens)",
        "run": "Run OCR",
        "stop": "Stop",
        "progress": "Progress",
        "notice": "Messages",
        "tab_rendered": "Rendered",
        "tab_raw": "Raw text",
        "tab_json": "JSON",
        "tab_boxes": "Boxes",
        "rendered": "Rendered result",
        "raw": "Raw model output",
        "json": "Extracted fields",
        "boxes_image": "Page with detected text",
        "boxes_table": "Recognised lines",
        "col_page": "Page",
        "col_text": "Text",
        "col_box": "Box (pixels)",
        "downloads": "Download the result (Markdown, text, JSON with boxes, zip)",
        "history": "This browser's history",
        "history_table": "Recent runs (kept in this browser only)",
        "history_clear": "Clear history",
        "col_when": "When",
        "col_file": "File",
        "col_task": "Task",
        "col_excerpt": "Beginning of the text",
        "page_of": "Page {i} of {n}",
        "overall": "{done} of {n} pages finished",
        "status_queued": "queued",
        "status_running": "running",
        "status_done": "done",
        "status_failed": "failed",
        "status_stopped": "stopped",
        "msg_no_file": "Choose an image or a PDF first.",
        "msg_stopped": "Stopped. Pages already finished are kept.",
        "msg_page_failed": "Page {i} failed: {error}",
        "msg_invalid_json": "The model's answer is not valid JSON, so it is shown as raw text below.",
        "msg_trimmed": "Page {i}: the answer started repeating itself; the repeated tail was cut off.",
        "msg_degraded": "Page {i} was read at a lower resolution because the engine is busy.",
        "msg_file_too_large": "The file is {size:.1f} MB; at most {limit:g} MB is accepted.",
        "msg_done": "Finished: {n} page(s).",
        "msg_no_boxes": "No text boxes yet.",
        "file_heading": "File {name}",
        "compare": "Compare two tasks or prompts",
        "compare_info": "Runs both on the first page of the first upload, side by side. Edit a prompt to try "
                        "another wording of the same task. Fields, language and answer length come from the form above.",
        "compare_a": "Left (A)",
        "compare_b": "Right (B)",
        "compare_answer": "Raw answer",
        "compare_run": "Run both",
        "engine_up": "Engine ready",
        "engine_starting": "Engine starting",
        "engine_down": "Engine unavailable",
        "msg_history_shown": "Showing the saved result of {when} ({file}).",
    },
    "zh": {
        "title": "# OCR 工作台",
        "subtitle": "上传图片或 PDF，选择任务，实时查看识别结果。文件只保存在本服务器上。",
        "ui_language": "界面语言",
        "files": "图片或 PDF",
        "preview": "页面预览",
        "preset": "任务",
        "preset_info": "模型对每一页要做的事。",
        "fields": "要抽取的字段",
        "fields_info": "用逗号分隔，例如：发票号码, 日期, 总金额。",
        "target_language": "翻译为",
        "question": "关于图片的问题",
        "language_hint": "文档语言（可选）",
        "language_hint_info": "例如“德语”。1.5 模型使用固定提示词，会忽略此项。",
        "pages": "页码（PDF）",
        "pages_info": "例如 1-3,7。留空表示全部页（不超过上限）。",
        "advanced": "高级：实际发送的提示词",
        "prompt": "发送给模型的提示词",
        "prompt_info": "可修改后仅用于本次请求。留空表示使用任务自带的提示词。",
        "max_tokens": "每页最长输出（token）",
        "run": "开始识别",
        "stop": "停止",
        "progress": "进度",
        "notice": "消息",
        "tab_rendered": "渲染结果",
        "tab_raw": "原始文本",
        "tab_json": "JSON",
        "tab_boxes": "文字框",
        "rendered": "渲染后的结果",
        "raw": "模型原始输出",
        "json": "抽取的字段",
        "boxes_image": "标出文字位置的页面",
        "boxes_table": "识别出的文字行",
        "col_page": "页",
        "col_text": "文字",
        "col_box": "坐标框（像素）",
        "downloads": "下载结果（Markdown、纯文本、带坐标的 JSON、zip）",
        "history": "本浏览器的历史记录",
        "history_table": "最近的识别（只保存在本浏览器）",
        "history_clear": "清空历史",
        "col_when": "时间",
        "col_file": "文件",
        "col_task": "任务",
        "col_excerpt": "文本开头",
        "page_of": "第 {i} 页，共 {n} 页",
        "overall": "已完成 {done} / {n} 页",
        "status_queued": "排队中",
        "status_running": "识别中",
        "status_done": "完成",
        "status_failed": "失败",
        "status_stopped": "已停止",
        "msg_no_file": "请先选择图片或 PDF 文件。",
        "msg_stopped": "已停止。已完成的页面会保留。",
        "msg_page_failed": "第 {i} 页失败：{error}",
        "msg_invalid_json": "模型的回答不是有效的 JSON，下面按原始文本显示。",
        "msg_trimmed": "第 {i} 页：回答开始重复，已截掉重复的结尾。",
        "msg_degraded": "引擎繁忙，第 {i} 页以较低分辨率识别。",
        "msg_file_too_large": "文件大小为 {size:.1f} MB，最多接受 {limit:g} MB。",
        "msg_done": "完成：共 {n} 页。",
        "msg_no_boxes": "暂无文字框。",
        "file_heading": "文件 {name}",
        "compare": "对比两个任务或提示词",
        "compare_info": "在第一个上传文件的第一页上同时运行两者，并排显示。修改提示词即可对比同一任务的不同写法。"
                        "字段、语言和输出长度取自上方表单。",
        "compare_a": "左（A）",
        "compare_b": "右（B）",
        "compare_answer": "原始回答",
        "compare_run": "同时运行",
        "engine_up": "引擎就绪",
        "engine_starting": "引擎启动中",
        "engine_down": "引擎不可用",
        "msg_history_shown": "正在显示 {when} 保存的结果（{file}）。",
    },
}

# Names shown in the language switch; each in its own language so anyone can find theirs.
LANGUAGE_NAMES: dict[Lang, str] = {"en": "English", "zh": "中文"}


def t(lang: Lang, key: str, **values: object) -> str:
    """The text ``key`` in ``lang`` (English when the language is unknown), formatted with ``values``."""
    table = TEXTS.get(lang, TEXTS["en"])
    text = table.get(key, TEXTS["en"][key])
    return text.format(**values) if values else text


def pick_language(configured: str, accept_language: str | None) -> Lang:
    """``en`` or ``zh``: the configured language, or for ``auto`` the browser's first supported choice."""
    if configured in LANGUAGES:
        return configured
    best: tuple[float, int, Lang] | None = None
    for position, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        primary = tag.strip().lower().split("-")[0]
        if primary not in LANGUAGES:
            continue
        quality = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        # Highest q wins; on a tie the earlier entry wins (browsers list in order of preference).
        candidate = (quality, -position, primary)
        if quality > 0 and (best is None or candidate > best):
            best = candidate
    return best[2] if best else "en"
