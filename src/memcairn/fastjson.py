"""``json.loads`` and ``json.dumps`` through the interpreter's C accelerator (``_json``) alone, for the hooks.

``import json`` loads ``re`` (and with it ``enum``, ``functools`` and ``collections``) and compiles six patterns
at import: about 8 ms of every hook process, each agent event paying it again. ``json`` itself hands ordinary
calls to the C scanner and encoder of ``_json``; this module calls them directly, with the same options, so
its results are ``json``'s own (``tests/test_fastjson.py`` compares them). ``json`` is still imported where its
Python layer has something to add: for an error (to raise ``json.JSONDecodeError`` with ``json``'s message),
for bytes that are not plain UTF-8 (a BOM, UTF-16 or UTF-32), and on an interpreter without ``_json``.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    import _json
except ImportError:  # another Python implementation: json's pure-Python path
    _json = None  # type: ignore[assignment]

WHITESPACE = " \t\n\r"  # what JSON allows around a value (json.decoder.WHITESPACE)
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Options:
    """What ``_json.make_scanner`` reads off a ``json.JSONDecoder``: its default options."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: dict = {}


_scan: Callable[[str, int], tuple[Any, int]] | None = None
if _json is not None and getattr(_json, "make_scanner", None) is not None:
    _scan = _json.make_scanner(_Options())


def _json_loads(data: str | bytes | bytearray) -> Any:
    import json

    return json.loads(data)


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads(data)``: the same value, or the same ``ValueError`` (``json.JSONDecodeError`` for text that is
    not JSON, ``UnicodeDecodeError`` for bytes that are not UTF-8)."""
    if _scan is None:
        return _json_loads(data)
    if isinstance(data, bytes | bytearray):
        if data[:3] == b"\xef\xbb\xbf" or b"\x00" in data[:4]:  # BOM, UTF-16 or UTF-32: json detects those
            return _json_loads(data)
        text = data.decode("utf-8", "surrogatepass")  # as json.loads decodes UTF-8
    elif isinstance(data, str):
        text = data
    else:
        return _json_loads(data)  # json's TypeError
    start, size = 0, len(text)
    while start < size and text[start] in WHITESPACE:
        start += 1
    try:
        value, end = _scan(text, start)
    except StopIteration:  # no value where one must start: json says so in its words
        return _json_loads(text)
    if text[end:].strip(WHITESPACE):  # something after the value ("Extra data")
        return _json_loads(text)
    return value


def _unserializable(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def dumps(value: Any, *, ensure_ascii: bool = True, separators: tuple[str, str] = (", ", ": ")) -> str:
    """``json.dumps(value, ensure_ascii=ensure_ascii, separators=separators)`` (its other options at their
    defaults)."""
    make = getattr(_json, "make_encoder", None) if _json is not None else None
    quote = getattr(_json, "encode_basestring_ascii" if ensure_ascii else "encode_basestring", None)
    if make is None or quote is None:
        return _json_dumps(value, ensure_ascii, separators)
    if isinstance(value, str):
        return quote(value)
    try:  # the arguments json.JSONEncoder.iterencode passes (markers fresh for each call, as there)
        encode = make({}, _unserializable, quote, None, separators[1], separators[0], False, False, True)
    except TypeError:  # an accelerator that takes other arguments: json knows them
        return _json_dumps(value, ensure_ascii, separators)
    return "".join(encode(value, 0))


def _json_dumps(value: Any, ensure_ascii: bool, separators: tuple[str, str]) -> str:
    import json

    return json.dumps(value, ensure_ascii=ensure_ascii, separators=separators)



def encode_json(value: Any) -> bytes:
    """``value`` as UTF-8 JSON. A lone surrogate (an agent that cut a tool's output inside an emoji sends one as
    a ``\\udXXX`` escape) becomes ``?``: strict UTF-8 would refuse it and the event would be lost."""
    return dumps(value, ensure_ascii=False).encode("utf-8", "replace")
