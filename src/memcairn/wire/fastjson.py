"""``json.loads`` and ``json.dumps`` through the interpreter's C accelerator (``_json``) alone, for the hooks.

``import json`` loads ``re`` (and with it ``enum``, ``functools`` and ``collections``) and compiles six patterns
at import: about 8 ms of every hook process, each agent event paying it again. ``json`` itself hands ordinary
calls to the C scanner and encoder of ``_json``; this module calls them directly, with the same options, so
its results are ``json``'s own (``tests/test_fastjson.py`` compares them). ``json`` is still imported where its
Python layer has something to add: for an error (to raise ``json.JSONDecodeError`` with ``json``'s message),
for bytes that are not plain UTF-8 (a BOM, UTF-16 or UTF-32), and on an interpreter without ``_json``.

Numbers JSON cannot carry (``NaN``, ``Infinity``, ``-Infinity``, which ``json`` reads by default, and a number
beyond a double's range such as ``1e999``, which it reads as infinity) are read as ``json`` reads them unless
``loads`` is told otherwise: ``nonfinite="refuse"`` raises ``NonFiniteNumber`` naming the number and where it
is, ``nonfinite="text"`` keeps each as its text (``"1e999"``). Written back by ``json``, such a value is no JSON
(``Infinity``): SQLite's JSON functions and PostgreSQL's ``jsonb`` refuse it.
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


class NonFiniteNumber(ValueError):
    """A number JSON cannot carry: ``NaN``, ``Infinity``, ``-Infinity`` or one beyond a double's range."""

    def __init__(self, number: str, where: str | None = None) -> None:
        self.number, self.where = number, where
        at = f" at {where}" if where else ""
        super().__init__(f"the number {number}{at} is not a finite number: NaN, Infinity and numbers beyond "
                         "+-1.8e308 are not JSON; send it as text or as a smaller number")


class _Marked(str):
    """A number JSON cannot carry, kept as its text while looking for where it is."""


def _finite_float(text: str) -> float:
    value = float(text)
    if value - value == 0.0:  # false for inf and nan (no `math`: the hooks import this module)
        return value
    raise NonFiniteNumber(text)


def _refuse_constant(name: str) -> Any:
    raise NonFiniteNumber(name)


def _text_float(text: str) -> float | str:
    value = float(text)
    return value if value - value == 0.0 else text


def _marked_float(text: str) -> float | str:
    value = float(text)
    return value if value - value == 0.0 else _Marked(text)


class _Refuse(_Options):
    parse_float = staticmethod(_finite_float)
    parse_constant = staticmethod(_refuse_constant)


class _AsText(_Options):
    parse_float = staticmethod(_text_float)
    parse_constant = staticmethod(str)


class _Mark(_Options):
    parse_float = staticmethod(_marked_float)
    parse_constant = staticmethod(_Marked)


_MODES: dict[str, type[_Options]] = {"accept": _Options, "refuse": _Refuse, "text": _AsText, "mark": _Mark}
_scanners: dict[str, Callable[[str, int], tuple[Any, int]]] = {}


def _scanner(mode: str) -> Callable[[str, int], tuple[Any, int]] | None:
    if mode not in _MODES:
        raise ValueError(f"nonfinite must be one of {', '.join(m for m in _MODES if m != 'mark')}, not {mode!r}")
    if _json is None or getattr(_json, "make_scanner", None) is None:
        return None
    scan = _scanners.get(mode)
    if scan is None:
        scan = _scanners[mode] = _json.make_scanner(_MODES[mode]())
    return scan


def _json_loads(data: str | bytes | bytearray, mode: str = "accept") -> Any:
    import json

    if mode == "accept":
        return json.loads(data)
    options = _MODES[mode]
    return json.loads(data, parse_float=options.parse_float, parse_constant=options.parse_constant)


def loads(data: str | bytes | bytearray, *, nonfinite: str = "accept") -> Any:
    """``json.loads(data)``: the same value, or the same ``ValueError`` (``json.JSONDecodeError`` for text that is
    not JSON, ``UnicodeDecodeError`` for bytes that are not UTF-8).

    ``nonfinite`` says what becomes of ``NaN``, ``Infinity``, ``-Infinity`` and numbers beyond a double's range:
    ``accept`` (``json``'s way: floats no JSON can hold), ``refuse`` (``NonFiniteNumber``, naming the first one
    and where it is, e.g. ``tool_input.values[2]``) or ``text`` (each kept as the text it was sent as)."""
    if nonfinite != "refuse":
        return _loads(data, nonfinite)
    try:
        return _loads(data, nonfinite)
    except NonFiniteNumber as exc:
        raise NonFiniteNumber(exc.number, _where(data)) from None


def _where(data: str | bytes | bytearray) -> str | None:
    """Where the first number JSON cannot carry is in ``data`` (read again, only to name it)."""
    try:
        return nonfinite_path(_loads(data, "mark"))
    except (ValueError, RecursionError):
        return None


def _loads(data: str | bytes | bytearray, mode: str) -> Any:
    scan = _scanner(mode)
    if scan is None:
        return _json_loads(data, mode)
    if isinstance(data, bytes | bytearray):
        if data[:3] == b"\xef\xbb\xbf" or b"\x00" in data[:4]:  # BOM, UTF-16 or UTF-32: json detects those
            return _json_loads(data, mode)
        text = data.decode("utf-8", "surrogatepass")  # as json.loads decodes UTF-8
    elif isinstance(data, str):
        text = data
    else:
        return _json_loads(data, mode)  # json's TypeError
    start, size = 0, len(text)
    while start < size and text[start] in WHITESPACE:
        start += 1
    try:
        value, end = scan(text, start)
    except StopIteration:  # no value where one must start: json says so in its words
        return _json_loads(text, mode)
    if text[end:].strip(WHITESPACE):  # something after the value ("Extra data")
        return _json_loads(text, mode)
    return value


def nonfinite_path(value: Any) -> str | None:
    """Where the first number JSON cannot carry is in ``value`` (``tool_input.values[2]``; ``$`` for ``value``
    itself), None when it holds none. A walk without recursion, in document order."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, current = stack.pop()
        if isinstance(current, _Marked) or isinstance(current, float) and current - current != 0.0:
            return path or "$"
        if isinstance(current, dict):
            stack.extend((f"{path}.{key}" if path else str(key), item) for key, item in reversed(current.items()))
        elif isinstance(current, list | tuple):
            stack.extend((f"{path}[{n}]", item) for n, item in reversed(list(enumerate(current))))
    return None


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
