"""Interface language switching: every labelled component is registered once, relabelled together.

A component registers which i18n keys feed its label, info text or value; ``relabel(lang)`` returns one
``gr.update`` per component in registration order, so the language switch is a single event.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from ocr_ui.i18n import LANGUAGES, t
from ocr_ui.prompts import Preset, presets_for


class Labeller:
    """The registry of translatable components of one Blocks."""

    def __init__(self, profile_name: str, lang: str) -> None:
        self.presets: dict[str, Preset] = presets_for(profile_name)
        self.lang = lang
        self._items: list[tuple[Any, dict[str, str]]] = []

    def add(self, component: Any, **keys: str) -> Any:
        """Register ``component`` with i18n keys for ``label``, ``info`` and/or ``value``; returns it."""
        self._items.append((component, keys))
        return component

    def components(self) -> list[Any]:
        """Registered components, in the order ``relabel`` answers for them."""
        return [c for c, _ in self._items]

    def preset_choices(self, lang: str | None = None) -> list[tuple[str, str]]:
        """(label, key) pairs of the presets in ``lang``."""
        lang = lang or self.lang
        return [(p.label_zh if lang == "zh" else p.label, p.key) for p in self.presets.values()]

    def box_headers(self, lang: str | None = None) -> list[str]:
        lang = lang or self.lang
        return [t(lang, "col_page"), t(lang, "col_text"), t(lang, "col_box")]

    def history_headers(self, lang: str | None = None) -> list[str]:
        lang = lang or self.lang
        return [t(lang, "col_when"), t(lang, "col_file"), t(lang, "col_task"), t(lang, "col_excerpt")]

    def relabel(self, lang: str) -> list[Any]:
        """One update per registered component, in ``lang``."""
        lang = lang if lang in LANGUAGES else "en"
        updates = []
        for component, keys in self._items:
            kwargs: dict[str, Any] = {}
            if "label" in keys:
                kwargs["label"] = t(lang, keys["label"])
            if "info" in keys:
                kwargs["info"] = t(lang, keys["info"])
            if "value" in keys:
                kwargs["value"] = t(lang, keys["value"])
            if component.elem_id in ("ocr-preset", "ocr-cmp-preset-a", "ocr-cmp-preset-b"):
                kwargs["choices"] = self.preset_choices(lang)
            if component.elem_id == "ocr-box-table":
                kwargs["headers"] = self.box_headers(lang)
            if component.elem_id == "ocr-history":
                kwargs["headers"] = self.history_headers(lang)
            updates.append(gr.update(**kwargs))
        return updates

    def history_rows(self, history: Any) -> list[list[str]]:
        """The history table: when, file, task, the first words of the text."""
        rows = []
        for entry in history or []:
            if not isinstance(entry, dict):
                continue
            excerpt = " ".join(str(entry.get("text", "")).split())[:80]
            task = str(entry.get("task", ""))
            label = self.presets[task].label if task in self.presets else task
            rows.append([str(entry.get("when", "")), str(entry.get("file", "")), label, excerpt])
        return rows
