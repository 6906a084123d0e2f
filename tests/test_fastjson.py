"""``memcairn.wire.fastjson`` gives ``json``'s own results (values, text and errors) without importing ``json``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memcairn.wire import fastjson

VALUES = [
    None, True, False, 0, -7, 2**70, 1.5, -0.0, 1e300, float("inf"), float("-inf"), "", "plain", "é ü 中文 😀",
    "quote \" backslash \\ controls \x00\x1f\n\t", "lone \udc80 surrogate", [], {}, [1, [2, [3, {"a": None}]]],
    {"k": "v", "n": {"deep": [1.25, "x", True]}, "é": "ü", "": 0}, {1: "int key", 2.5: "float key", False: "bool key"},
    (1, 2), list(range(50)),
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_is_json_dumps(value: object) -> None:
    for ascii_only in (True, False):
        assert fastjson.dumps(value, ensure_ascii=ascii_only) == json.dumps(value, ensure_ascii=ascii_only)
        compact = fastjson.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))
        assert compact == json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_loads_reads_what_json_writes(value: object) -> None:
    for ascii_only in (True, False):
        text = json.dumps(value, ensure_ascii=ascii_only)
        expected = json.loads(text)
        for data in (text, f" \n\t{text}\r\n ", text.encode("utf-8", "surrogatepass")):
            got = fastjson.loads(data)
            assert json.dumps(got) == json.dumps(expected)  # NaN != NaN: compared as text


def test_nan_and_constants() -> None:
    assert fastjson.dumps(float("nan")) == "NaN"
    assert repr(fastjson.loads("[NaN, Infinity, -Infinity]")) == "[nan, inf, -inf]"


@pytest.mark.parametrize("bad", ["", "   ", "{", "[1,]", "{\"a\" 1}", "1 2", "[1] x", "tru", "\ufeff{}", "'x'",
                                 "{\"a\": \"\x01\"}"])
def test_errors_are_jsons_own(bad: str) -> None:
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(bad)
    with pytest.raises(json.JSONDecodeError) as got:
        fastjson.loads(bad)
    assert str(got.value) == str(expected.value)


def test_bytes_json_decodes_itself() -> None:
    for data in ('{"a": "é"}'.encode("utf-16"), '{"a": "é"}'.encode("utf-32-le"), b'\xef\xbb\xbf{"a": 1}'):
        assert fastjson.loads(data) == json.loads(data)
    with pytest.raises(UnicodeDecodeError):
        fastjson.loads(b'{"a": "\xff"}')


def test_unserializable_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="Object of type set is not JSON serializable"):
        fastjson.dumps({"a": {1}})
    with pytest.raises(ValueError, match="Circular reference"):
        loop: list = []
        loop.append(loop)
        fastjson.dumps(loop)


def test_reading_and_writing_import_no_json_and_no_re() -> None:
    probe = (f"import sys\nsys.path.insert(0, {_src()!r})\nfrom memcairn.wire import fastjson\n"
             "assert fastjson.loads(fastjson.dumps({'a': [1, 2.5, 'é', None]}, ensure_ascii=False)) == "
             "{'a': [1, 2.5, 'é', None]}\n"
             "print(' '.join(m for m in ('json', 're', 'enum') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def _src() -> str:
    """The folder that holds the ``memcairn`` package (``src`` of a checkout, or site-packages)."""
    import memcairn

    return str(Path(memcairn.__file__).parent.parent)
