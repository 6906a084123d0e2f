"""JSON of any depth, read without recursing past a bound (standard library only: the hooks use it).

An agent may send a tool input nested thousands of levels deep. Python's ``json`` parses about 990 levels
before it raises ``RecursionError``, and every recursive walk after it (redaction, storage, rendering) fails
sooner, each frame costing a level. So what is deeper than ``MAX_DEPTH`` levels is cut and named: the
container there becomes the text ``cut_marker()``, and the rest of the event is kept. ``loads_bounded`` cuts
while parsing text too deep for ``json`` at all, so no depth of input raises. Default options are read with
``memcairn.wire.fastjson`` (the hooks read every event here, and ``json`` with its ``re`` costs them ~8 ms).
"""

from __future__ import annotations

from memcairn.wire.fastjson import dumps, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 64  # no event needs more; a walk of that many levels stays far from the recursion limit


def cut_marker(depth: int = MAX_DEPTH) -> str:
    """What stands for a value nested deeper than ``depth`` levels."""
    return f"[cut: nested deeper than {depth} levels]"


def depth_of(value: Any) -> int:
    """How many containers deep ``value`` is (a scalar: 0), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        current, level = stack.pop()
        if isinstance(current, dict):
            deepest = max(deepest, level)
            stack.extend((item, level + 1) for item in current.values())
        elif isinstance(current, list | tuple):
            deepest = max(deepest, level)
            stack.extend((item, level + 1) for item in current)
    return deepest


def cut_deep(value: Any, max_depth: int = MAX_DEPTH) -> Any:
    """A copy of ``value`` in which every container nested deeper than ``max_depth`` levels is replaced by
    ``cut_marker(max_depth)``; ``value`` itself when it is not that deep. No recursion."""
    if depth_of(value) <= max_depth:
        return value

    def shell(item: Any) -> Any:
        return {} if isinstance(item, dict) else []

    if not isinstance(value, dict | list | tuple):
        return value
    root = shell(value)
    stack = [(value, root, 1)]
    while stack:
        source, target, level = stack.pop()
        pairs = source.items() if isinstance(source, dict) else enumerate(source)
        for key, item in pairs:
            if isinstance(item, dict | list | tuple):
                if level >= max_depth:
                    copy: Any = cut_marker(max_depth)
                else:
                    copy = shell(item)
                    stack.append((item, copy, level + 1))
            else:
                copy = item
            if isinstance(target, dict):
                target[key] = copy
            else:
                target.append(copy)
    return root


_TOKENS = r'"(?:[^"\\]|\\.)*"|[\[\]{}]'  # compiled on first use: the hooks rarely need it


def cut_deep_text(text: str, max_depth: int = MAX_DEPTH) -> str:
    """JSON text with every array or object that opens deeper than ``max_depth`` levels replaced by the JSON
    string of ``cut_marker(max_depth)``. Strings are skipped whole, so brackets inside them do not count; text
    that is not JSON stays not JSON (the parser then says why)."""
    import re

    marker = dumps(cut_marker(max_depth))
    out: list[str] = []
    kept_from, depth, cut_at = 0, 0, -1
    for match in re.finditer(_TOKENS, text, re.DOTALL):
        token = match.group(0)
        if token in "[{":
            depth += 1
            if depth > max_depth and cut_at < 0:
                out.append(text[kept_from:match.start()])
                cut_at = depth
        elif token in "]}":
            if depth == cut_at:
                out.append(marker)
                kept_from, cut_at = match.end(), -1
            depth -= 1
    if cut_at >= 0:  # never closed: the text is truncated, and the parser will say so
        out.append(marker)
        kept_from = len(text)
    out.append(text[kept_from:])
    return "".join(out)


def loads_bounded(raw: str | bytes, max_depth: int = MAX_DEPTH, *, nonfinite: str = "text") -> Any:
    """``json.loads(raw)`` with everything deeper than ``max_depth`` levels cut (``cut_deep``), also for text
    too deep for ``json`` itself (cut before parsing). Raises ``ValueError`` for text that is not JSON.

    A number JSON cannot carry (``NaN``, ``Infinity``, ``1e999``) is kept as its text by default, as a cut part
    is named: the event is kept and stays JSON (``json`` would read an infinity, which written back is no JSON
    and stops SQLite's JSON functions). ``nonfinite="refuse"`` raises ``fastjson.NonFiniteNumber`` (a
    ``ValueError`` naming the number and where it is) instead: the worker's door."""
    try:
        value = loads(raw, nonfinite=nonfinite)
    except RecursionError:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
        value = loads(cut_deep_text(text, max_depth), nonfinite=nonfinite)
    return cut_deep(value, max_depth)
