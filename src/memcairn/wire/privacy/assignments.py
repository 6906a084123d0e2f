"""Secrets in assignments: ``password = "…"``, ``"api_key": "…"``, ``export DB_PASSWORD=…``."""

from __future__ import annotations

import re
from functools import cache
from typing import NamedTuple

from memcairn.wire.privacy.rules import _ASSIGNMENT_NAME, _PLACEHOLDER_START, placeholder

_KEY_WORDS = (
    r"pass(?:word|wd|phrase)?|pwd|secret|token|credentials?"
    r"|(?:api|access|private|auth|secret|signing|encryption|master|session|client)[_-]?key"
)
# Where a word starts inside a name: after ``_``, ``.`` or ``-``, at a capital (``apiKey``, ``DBPassword``).
_WORD_START = r"(?:[_.-]|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z]))"
_VALUE_STOPS = r"\s\"'`,;(){}\[\]<>&"


_KEY = (
    r"(?<![\w.-])(?P<key>-{0,2}[A-Za-z_][\w.-]{0,63}+)"
    r"(?<=ss|wd|rd|se|et|en|al|ls|ey|ng|SS|WD|RD|SE|ET|EN|AL|LS|EY|NG)"
)
_ANNOTATION = (
    r"(?P<ann>[ \t]*:[ \t]*[A-Za-z_][\w.\[\]]*+(?:[ \t]*[|,][ \t]*[A-Za-z_\[\]][\w.\[\]]*+)*+(?=[ \t]*=[^=>]))"
)
_SEPARATOR_AND_VALUE = (
    r"(?P<sep>[ \t]*(?:===?|:=|=>|=|:)[ \t]*)"
    r"(?:(?=(?P<quoted>(?:[bBrRuU]{1,2})?\"[^\"\n]{1,512}\"|\\\"(?:[^\"\\\n]|\\[^\"\n]){1,512}?\\\""
    r"|(?:[bBrRuU]{1,2})?'[^'\n]{1,512}'|`[^`\n]{1,512}`))"
    rf"|(?P<bare>[^{_VALUE_STOPS}]{{1,512}}+))"
)


class _AssignmentRegexes(NamedTuple):
    plain: re.Pattern[str]
    annotated: re.Pattern[str]
    key_suffix: re.Pattern[str]
    password_suffix: re.Pattern[str]
    weak_suffix: re.Pattern[str]
    token_shape: re.Pattern[str]
    hex_run: re.Pattern[str]
    digit: re.Pattern[str]
    upper: re.Pattern[str]
    lower: re.Pattern[str]
    identifier: re.Pattern[str]
    line_end: re.Pattern[str]


@cache
def _assignment_regexes() -> _AssignmentRegexes:
    """The candidate scanners plus the checks they are filtered with. The look-behind after the key is a cheap
    filter (the key's last two letters must end one of the key words); the full key check runs in Python.
    ``plain`` finds every candidate; ``annotated`` rereads one as ``key: Type = value`` when it holds no secret."""
    return _AssignmentRegexes(
        plain=re.compile(rf"{_KEY}(?P<quote>\\?[\"']?){_SEPARATOR_AND_VALUE}"),
        annotated=re.compile(rf"{_KEY}(?P<quote>\\?[\"']?){_ANNOTATION}{_SEPARATOR_AND_VALUE}"),
        key_suffix=re.compile(rf"(?:^|{_WORD_START})(?i:{_KEY_WORDS})$"),
        password_suffix=re.compile(rf"(?:^|{_WORD_START})(?i:pass(?:word|wd|phrase)?)$"),
        weak_suffix=re.compile(rf"{_WORD_START}(?i:key|signing)$"),
        token_shape=re.compile(r"[A-Za-z0-9_+/=.-]{16,512}"),
        hex_run=re.compile(r"[0-9a-fA-F-]+"),
        digit=re.compile(r"[0-9]"),
        upper=re.compile(r"[A-Z]"),
        lower=re.compile(r"[a-z]"),
        identifier=re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"),
        line_end=re.compile(r"[ \t]*(?:#[^\n]*)?(?:\r?\n|\Z)"),
    )


def _line_prefix(text: str, position: int, limit: int = 24) -> str | None:
    """What stands between the start of the line and ``position``, or None when that is longer than ``limit``."""
    chunk = text[max(0, position - limit) : position]
    newline = chunk.rfind("\n")
    if newline >= 0:
        return chunk[newline + 1 :]
    return chunk if position <= limit else None


def _is_env_style(match: re.Match[str], text: str) -> bool:
    """``KEY=value`` with no spaces, as in a shell, a Dockerfile or a .env file: an upper-case key, or any key at
    the start of a line."""
    if match.group("sep") != "=":
        return False
    key = match.group("key")
    if not any(char.islower() for char in key):
        return True
    return _line_prefix(text, match.start("key")) in ("", "export ", "set ")


def _is_yaml_style(match: re.Match[str], text: str, value_end: int) -> bool:
    """``key: value`` as a whole line, as in YAML or a log line."""
    if match.group("sep").strip() != ":":
        return False
    prefix = _line_prefix(text, match.start("key"))
    if prefix is None or prefix.strip(" \t\"'") not in ("", "-"):
        return False
    return _assignment_regexes().line_end.match(text, value_end) is not None


_MASK_CHARS = frozenset("*•xX#")
_HEX_COLOUR = r"#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})"
_OPTION = r"--?[a-z][a-z0-9-]{0,40}"


def _is_masked(value: str) -> bool:
    """``****``, ``xxxx``: a value shown masked, no secret."""
    return set(value) <= _MASK_CHARS


def _quoted_is_secret(inner: str) -> bool:
    """A quoted literal is a secret unless it is empty, a template (``${X}``, ``{{ x }}``, ``%(x)s``, ``<x>``), a
    mask (``'***'``) or a command-line option compared with (``token === '--json'``)."""
    stripped = inner.strip()
    if not stripped or stripped.startswith((_PLACEHOLDER_START, "$", "{", "%(", "<", "#{")):
        return False
    return not _is_masked(stripped) and re.fullmatch(_OPTION, stripped) is None


def _token_shaped(value: str) -> bool:
    """Whether a value under a name that only may hold a secret (``STRIPE_KEY``, ``JWT_SIGNING``; ``sort_key``,
    ``primary_key`` hold none) reads as a random token: 16 characters or more of a token's alphabet, with digits
    and both cases, or 24 hex digits or more. A path, a URL, words and dotted names are not."""
    regexes = _assignment_regexes()
    if regexes.token_shape.fullmatch(value) is None or value.startswith(("/", ".", "-")):
        return False
    if regexes.hex_run.fullmatch(value) is not None:
        return len(value) >= 24 and regexes.digit.search(value) is not None
    return all(check.search(value) is not None for check in (regexes.digit, regexes.upper, regexes.lower))


# What ``password: X`` names when X is a type (an annotation, a schema) or a word about the password, not one.
_TYPE_WORDS = frozenset({
    "str", "string", "bytes", "int", "integer", "number", "bool", "boolean", "any", "unknown", "object", "none",
    "null", "nil", "undefined", "optional", "text", "char", "varchar", "secret", "secretstr", "password", "field",
    "required", "missing", "invalid", "expired", "hidden", "redacted", "masked", "unset", "empty", "changed",
    "provided", "generated", "encrypted", "hashed", "omitted", "true", "false", "yes", "no", "see", "todo",
})


def _under_yaml_parent(text: str, position: int) -> bool:
    """Whether the line before the one at ``position`` is a YAML mapping's key (``database:``) or entry
    (``user: app``), or the line is a list item (``- password: x``)."""
    line_start = text.rfind("\n", 0, position) + 1
    if text[line_start:position].strip(" \t") == "-":
        return True
    if line_start == 0:
        return False
    previous = text[text.rfind("\n", 0, line_start - 1) + 1 : line_start - 1]
    return re.fullmatch(r"[ \t]*(?:-[ \t]+)?[\w.-]{1,64}:(?:[ \t][^\n]*)?\r?", previous) is not None


def _reads_as_type(value: str) -> bool:
    camel = value[0].isupper() and sum(char.isupper() for char in value) >= 2 and not value.isupper()
    return camel or value.lower() in _TYPE_WORDS


_ENV_MIN_LENGTH = 4
_ENV_LITERALS = frozenset({"true", "false", "none", "null", "nil", "unset", "empty"})


def _is_env_literal(value: str) -> bool:
    return value.isdigit() or value.lower() in _ENV_LITERALS


def _bare_is_secret(match: re.Match[str], text: str, value: str, end: int, password: bool) -> bool:
    """An unquoted value is a secret when it is long enough and does not read as code: a call, an index, an
    attribute, a variable reference, or (outside env and YAML lines) a plain identifier without digits. In an
    env line (``PGPASSWORD=hunter2``) and under a password's name (``password: hunter2``) a shorter value counts
    too, unless it is a number or a literal; a password alone on a YAML line counts unless it reads as a type."""
    env_style = _is_env_style(match, text)
    short = env_style or password
    if len(value) < (_ENV_MIN_LENGTH if short else 8) or value.startswith(("$", "%")) or _is_masked(value):
        return False
    if password and re.fullmatch(_HEX_COLOUR, value):  # a style sheet's ``--pass: #22c55e``
        return False
    if text[end : end + 1] in ("(", "[") or (short and len(value) < 8 and _is_env_literal(value)):
        return False
    if _assignment_regexes().identifier.fullmatch(value) is None:
        return True
    if env_style:
        return True
    if "." in value:
        return False
    if any(char.isdigit() for char in value):
        return True
    if password:
        if _reads_as_type(value) or not _is_yaml_style(match, text, end):
            return False
        # ``password: Changeme`` alone may be a type's name; under a YAML parent key it is a value
        return not (value[0].isupper() and value[1:].islower()) or _under_yaml_parent(text, match.start("key"))
    if len(value) < 8:
        return False
    looks_like_type = value[0].isupper() and not value.isupper()
    return not looks_like_type and _is_yaml_style(match, text, end)


def _is_secret_key(key: str) -> bool:
    """Whether ``key`` names a secret: it ends in a key word (``db_password``, ``apiKey``), or it is an upper-case
    environment name that runs one in (``PGPASSWORD``, ``NPMTOKEN``)."""
    if key.lower() == "pwd" or key == "PASS":  # the working directory; ``--- PASS: TestName`` (go test)
        return False
    if _assignment_regexes().key_suffix.search(key) is not None or key.lower() == "private_key_id":
        return True
    return key.isupper() and key.endswith(("PASSWORD", "PASSWD", "SECRET", "TOKEN"))


def _is_weak_key(key: str) -> bool:
    """A name that holds a secret only when its value looks like one: ``STRIPE_KEY``, ``JWT_SIGNING`` (never a
    public key)."""
    if key.lower().replace("_", "").replace("-", "").endswith("publickey"):
        return False
    return _assignment_regexes().weak_suffix.search(key) is not None


def _assignment_secret_span(match: re.Match[str], text: str) -> tuple[int, int] | None:
    key = match.group("key")
    weak = not _is_secret_key(key)
    if weak and not _is_weak_key(key):
        return None
    quoted = match.group("quoted")
    if quoted is not None:
        start = match.start("quoted")
        quote_at = next(i for i, char in enumerate(quoted) if char in "\"'`")
        closing = 2 if quoted.startswith("\\") else 1  # JSON inside a JSON string: \"value\"
        inner = quoted[quote_at + 1 : -closing]
        secret = _token_shaped(inner) if weak else _quoted_is_secret(inner)
        return (start + quote_at + 1, start + len(quoted) - closing) if secret else None
    value, start = match.group("bare"), match.start("bare")
    end = start + len(value)
    if weak:
        secret = _token_shaped(value) and text[end : end + 1] not in ("(", "[")
    else:
        password = _assignment_regexes().password_suffix.search(key.lstrip("-")) is not None
        secret = _bare_is_secret(match, text, value, end, password)
    return (start, end) if secret else None


def _next_secret(text: str, position: int) -> tuple[re.Match[str], tuple[int, int] | None] | None:
    """The next assignment candidate from ``position`` and the span of its secret value (None when it holds none).
    A ``key: value`` candidate that holds no secret is read again as ``key: Type = value``."""
    regexes = _assignment_regexes()
    match = regexes.plain.search(text, position)
    if match is None:
        return None
    span = _assignment_secret_span(match, text)
    if span is None and match.group("sep").strip() == ":":
        annotated = regexes.annotated.match(text, match.start())
        if annotated is not None:
            match, span = annotated, _assignment_secret_span(annotated, text)
    return match, span


def _redact_assignments(text: str) -> tuple[str, int]:
    """Scan candidates one at a time: after a rejected candidate the scan resumes right after its separator, so a
    bare value that was looked at and kept (``--set=secret=…``) is still searched for keys of its own."""
    out: list[str] = []
    kept_from = count = 0
    marker = placeholder(_ASSIGNMENT_NAME)
    found = _next_secret(text, 0)
    while found is not None:
        match, span = found
        if span is not None:
            out.append(text[kept_from : span[0]])
            out.append(marker)
            kept_from = span[1]
            count += 1
        found = _next_secret(text, max(kept_from, match.end("sep")))
    if not count:
        return text, 0
    out.append(text[kept_from:])
    return "".join(out), count

