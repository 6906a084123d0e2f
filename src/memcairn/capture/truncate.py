"""Bounding tool inputs and outputs before they reach a model or the offline extractor.

A long tool output usually matters at both ends (the command and its first lines, the error or the summary
at the bottom), so a cut keeps the head and the tail and says in the middle how much was dropped.
"""

from __future__ import annotations

import json
from typing import Any

_MARKER = "\n…[cut {n} characters]…\n"


def cut(text: str, limit: int) -> str:
    """``text`` with its middle replaced by a marker when longer than ``limit`` characters.

    ``limit`` counts the characters kept (two thirds head, one third tail); the marker comes on top. A limit
    of zero or less means no limit.
    """
    if limit <= 0 or len(text) <= limit:
        return text
    head = (limit * 2 + 2) // 3
    tail = limit - head
    dropped = len(text) - limit
    return text[:head] + _MARKER.format(n=dropped) + (text[-tail:] if tail else "")


def cut_bytes(text: str, max_bytes: int) -> str:
    """``text`` cut as ``cut`` does (marker included) so that its UTF-8 encoding is at most ``max_bytes``."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    chars = len(text)
    while size > max_bytes and chars > 0:
        # shrink in proportion to the excess, with room for the marker; strictly fewer characters each round
        chars = min(chars - 1, chars * (max_bytes - 64) // size)
        out = cut(text, max(chars, 1))
        size = len(out.encode("utf-8", errors="surrogatepass"))
        if size <= max_bytes:
            return out
    return text if size <= max_bytes else ""


def cut_value(value: Any, limit: int) -> Any:
    """``value`` with every string inside it (dict values and keys left alone, lists, tuples) cut to ``limit``."""
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, dict):
        return {key: cut_value(item, limit) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [cut_value(item, limit) for item in value]
    return value


def render_bounded(value: Any, limit: int) -> str:
    """A tool input or response as text of at most about ``limit`` characters: strings as they are, anything
    else as JSON (each string cut first so the JSON keeps its shape, then the whole text cut)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return cut(value, limit)
    if isinstance(value, bytes):
        return cut(value.decode("utf-8", errors="replace"), limit)
    try:
        text = json.dumps(cut_value(value, limit), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return cut(text, limit)
