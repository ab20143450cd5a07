"""The upload box reads only files uploaded through this app's own upload route: no server paths, no URLs.

Before an event runs, Gradio copies every file an API caller names (a server path or an http URL) into
its cache through the input component's ``(async_)move_resource_to_block_cache``. Its check that a
path was really uploaded runs only after ``Blocks.launch()``; an app mounted into FastAPI
(``gr.mount_gradio_app``, as here) never launches, so in Gradio 6.31 a caller could name any image or
PDF the server can read, or a public URL that Gradio would download. ``accept_uploads_only`` guards
one component's copy step: a file must already lie inside Gradio's upload folder.

The guard wraps the instance's methods instead of subclassing ``gr.File``: a component subclass makes
Gradio write a ``.pyi`` copy of its module into the package at import, and needs its own frontend name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import gradio as gr
from gradio.utils import abspath, is_in_or_equal
from gradio_client.utils import is_http_url_like

UPLOADS_ONLY = "Only files uploaded through this page can be read. Upload the file again."
C = TypeVar("C", bound=gr.components.Component)
PathLike = str | Path | None


def is_own_upload(path: PathLike, cache_dir: str) -> bool:
    """True for a local file inside ``cache_dir`` (Gradio's upload folder); URLs never are."""
    if path is None:
        return True
    text = str(path)
    return not is_http_url_like(text) and is_in_or_equal(abspath(text), cache_dir)


def accept_uploads_only(component: C) -> C:
    """Make ``component`` refuse (``gr.Error``) every input file that was not uploaded to this app."""
    copy_async: Callable[[PathLike], Awaitable[str | None]] = component.async_move_resource_to_block_cache
    copy_sync: Callable[[PathLike], str | None] = component.move_resource_to_block_cache
    cache_dir = component.GRADIO_CACHE

    def check(path: PathLike) -> None:
        if not is_own_upload(path, cache_dir):
            raise gr.Error(UPLOADS_ONLY)  # never echo the path: it is the caller's probe of our disk

    async def guarded_async(path: PathLike) -> str | None:
        check(path)
        return await copy_async(path)

    def guarded_sync(path: PathLike) -> str | None:
        check(path)
        return copy_sync(path)

    component.async_move_resource_to_block_cache = guarded_async  # type: ignore[method-assign,assignment]
    component.move_resource_to_block_cache = guarded_sync  # type: ignore[method-assign,assignment]
    return component
