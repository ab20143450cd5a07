"""Safe display of model output: an allow-list HTML sanitizer and a Markdown pre-pass built on it.

Model output is untrusted (a document can carry text that looks like markup, and a model can echo it).
Tables, emphasis and lists survive as real tags; every other tag is dropped (its text kept), the
contents of script-like tags are dropped whole, and no attribute survives except a numeric colspan /
rowspan, so nothing can run script or load a remote resource. Built on the stdlib ``html.parser``: the
allow-list is small enough that a dependency would buy nothing.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from typing import Any

ALLOWED_TAGS = frozenset({
    "table", "thead", "tbody", "tfoot", "tr", "td", "th", "caption",
    "b", "i", "em", "strong", "sub", "sup", "br", "p", "span", "div", "ul", "ol", "li",
    "h1", "h2", "h3", "h4", "h5", "h6", "code", "pre",
})
_VOID_TAGS = frozenset({"br"})
# Their contents are code or foreign documents, never text worth showing.
_DROP_WITH_CONTENT = frozenset({
    "script", "style", "iframe", "object", "embed", "noscript", "noembed", "noframes", "template",
    "svg", "math", "frameset", "xmp", "plaintext", "title", "head", "textarea", "select", "applet",
})
# Every name a browser treats as an element (HTML, obsolete HTML, SVG and MathML roots). "<" before any
# other word ("x<y then", "List<String>") is text the model transcribed: shown, not parsed as a tag.
_KNOWN_TAGS = ALLOWED_TAGS | _DROP_WITH_CONTENT | frozenset("""
    a abbr acronym address area article aside audio base basefont bdi bdo bgsound big blink blockquote body
    button canvas center cite col colgroup data datalist dd del details dfn dialog dir dl dt fieldset
    figcaption figure font footer form frame header hgroup hr html image img input ins isindex kbd keygen
    label legend link listing main map mark marquee menu menuitem meta meter nav nobr output param picture
    portal progress q rb rp rt rtc ruby s samp search section slot small source spacer strike summary
    time track tt u var video wbr
""".split())
_SPAN_ATTRS = frozenset({"colspan", "rowspan"})
# A tag name runs to whitespace, "/" or ">" (as in a browser's tokenizer): "<b<" names no known element.
_NAME_AFTER_LT = re.compile(r"<(?=/?([A-Za-z][^\s/>]*))")
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_UNFINISHED_TAG = re.compile(r"<[A-Za-z/!?]")


class _Sanitizer(HTMLParser):
    """Rebuilds the input from the allow-list; ``markdown=True`` escapes only what could open a tag."""

    def __init__(self, *, markdown: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.markdown = markdown
        self.out: list[str] = []
        self.text: list[str] = []
        self.open: list[str] = []
        self.dropping: list[str] = []

    def _flush(self) -> None:
        if not self.text:
            return
        data = "".join(self.text)
        self.text.clear()
        # Markdown keeps '>' (block quotes) and '&' (the renderer shows entities as text); '<' before a
        # letter, '/', '!' or '?' is the only thing that could start markup, so it is always escaped.
        self.out.append(_TAG_START.sub("&lt;", data) if self.markdown else html.escape(data, quote=False))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.dropping or tag in _DROP_WITH_CONTENT:
            if tag in _DROP_WITH_CONTENT:
                self.dropping.append(tag)
            return
        if tag not in ALLOWED_TAGS:
            return
        self._flush()
        kept = "".join(
            f' {name}="{value}"' for name, value in attrs
            if name in _SPAN_ATTRS and value is not None and value.isdigit() and 0 < int(value) <= 1000
        )
        self.out.append(f"<{tag}{kept}>")
        if tag not in _VOID_TAGS:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID_TAGS and self.open and self.open[-1] == tag and not self.dropping:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if self.dropping:
            if tag == self.dropping[-1]:
                self.dropping.pop()
            return
        if tag not in self.open:
            return  # a stray closing tag: nothing to close
        self._flush()
        # Close whatever was left open inside it, so the output is always balanced.
        while self.open:
            inner = self.open.pop()
            self.out.append(f"</{inner}>")
            if inner == tag:
                break

    def handle_data(self, data: str) -> None:
        if not self.dropping:
            self.text.append(data)

    # Comments, doctypes, processing instructions and CDATA are not content: the defaults drop them.

    def finish(self) -> str:
        # A tag still unfinished at the end (mid-stream "<td col") is not text; show it once complete.
        if _UNFINISHED_TAG.match(self.rawdata):
            self.rawdata = ""
        self.close()
        self._flush()
        self.out.extend(f"</{tag}>" for tag in reversed(self.open))
        self.open.clear()
        return "".join(self.out)


def _text_lt(text: str) -> str:
    return _NAME_AFTER_LT.sub(lambda m: "<" if m.group(1).lower() in _KNOWN_TAGS else "&lt;", text)


def sanitize_html(text: str) -> str:
    """HTML with only allow-listed tags (numeric colspan/rowspan the only attributes); the rest escaped."""
    parser = _Sanitizer(markdown=False)
    parser.feed(_text_lt(text))
    return parser.finish()


# Math and code the Markdown renderer shows itself; "<" inside math gets a space after it so no HTML
# parser reads "a<b" as a tag (KaTeX ignores the space).
_MATH = re.compile(r"\$\$.+?\$\$|\\\[.+?\\\]|\\\(.+?\\\)|(?<![\\$])\$[^$\n]+?\$", re.S)
_TARGET = r"\(\s*((?:[^()\s]|\([^()\s]*\))*)(?:\s+\"[^\"\n]*\")?\s*\)"  # url, one level of (), "title"
_IMAGE = re.compile(r"!\[([^\]\n]*)\]" + _TARGET)
_LINK = re.compile(r"\[([^\]\n]+)\]" + _TARGET)


_UNSAFE_SCHEME = re.compile(r"^(?:javascript|vbscript|data|file):")


def _link_text(m: re.Match[str]) -> str:
    # The address stays as plain text (no link is made); a script / data / file address is dropped.
    target = re.sub(r"[\x00-\x20]", "", html.unescape(m.group(2))).lower()
    return m.group(1) if not m.group(2) or _UNSAFE_SCHEME.match(target) else f"{m.group(1)} ({m.group(2)})"


def _unlink(part: str) -> str:
    # An image would load a remote resource the moment it is shown: keep its alt text only.
    return _LINK.sub(_link_text, _IMAGE.sub(lambda m: m.group(1), part))


def render_markdown_safe(text: str) -> str:
    """Markdown for display: HTML reduced to the allow-list, no images or script links, math untouched."""
    pieces: list[str] = []
    last = 0
    for m in _MATH.finditer(text):
        pieces.append(_unlink(text[last:m.start()]))
        pieces.append(re.sub(r"<(?=[A-Za-z/!?])", "< ", m.group(0)))
        last = m.end()
    pieces.append(_unlink(text[last:]))
    parser = _Sanitizer(markdown=True)
    parser.feed(_text_lt("".join(pieces)))
    return parser.finish()


def latex_delimiters() -> list[dict[str, Any]]:
    """The math delimiters HunyuanOCR emits, in the form gr.Markdown's ``latex_delimiters`` takes."""
    return [
        {"left": "$$", "right": "$$", "display": True},
        {"left": "\\[", "right": "\\]", "display": True},
        {"left": "$", "right": "$", "display": False},
        {"left": "\\(", "right": "\\)", "display": False},
    ]
