"""Privacy rules applied to every hook event before anything is stored or sent to a model.

Two steps, in this order: text the user fenced with ``<private>…</private>`` is dropped, then anything that looks
like a credential is replaced by a typed placeholder such as ``[REDACTED:github_token]``. Both fail closed: an
unclosed ``<private>`` hides everything after it, a ``</private>`` never opened everything before it, and a
truncated private key is still redacted.

Every pattern is written so that its cost stays linear in the input (bounded quantifiers wherever a match could
start at many positions), and patterns are compiled on first use to keep the import cheap.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from functools import cache
from typing import Any, NamedTuple

_PLACEHOLDER_START = "[REDACTED:"
_NOT_PLACEHOLDER = r"(?!\[REDACTED:)"
_MAX_PASSES = 3
# A command-line argument that may be a secret: not an option, a variable, a substitution or a template, a
# ``name=value`` spec (``docker build --secret id=x,src=f``), a help text's metavar (``--token TOKEN``) nor prose
# (``the --token flag``); and the arguments between a command and its ``-p``.
_CLI_STOPS = r"\s\"'`;|&<>"
_CLI_VALUE = (
    rf"(?![-$%{{<(`]){_NOT_PLACEHOLDER}(?![A-Za-z_]\w*=[^=])(?![A-Z][A-Z_]*+(?![^{_CLI_STOPS}]))"
    r"(?!(?i:flags?|options?|arguments?|parameters?|values?|switch(?:es)?)\b)"
    rf"[^{_CLI_STOPS}]{{3,256}}"
)
_CLI_ARGUMENTS = r"\b(?:[^\s;|&]|[ \t](?!-p)){0,300}+[ \t]"

# (placeholder type, pattern, flags). A pattern with a ``secret`` group has only that group replaced, so the
# context around it (a header name, a URL's scheme and host) survives; otherwise the whole match is replaced.
# Order matters: specific token formats run before the generic header, URL and assignment rules.
_RULES: tuple[tuple[str, str, int], ...] = (
    (
        "private_key",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s:,.\\]|-(?!----)|[\"'`][\s+,]{0,80}+[\"'`])*"
        r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?",
        0,
    ),
    ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", 0),
    ("anthropic_api_key", r"\bsk-ant-[A-Za-z0-9_-]{20,}", 0),
    (
        "openai_api_key",
        r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-)?(?=[A-Za-z_-]{0,255}+[0-9])[A-Za-z0-9_-]{20,}",
        0,
    ),
    ("github_token", r"\bgh[pousr]_[A-Za-z0-9]{30,}", 0),
    ("github_fine_grained_token", r"\bgithub_pat_[A-Za-z0-9_]{30,}", 0),
    ("gitlab_token", r"\bgl(?:pat|dt|rt|ptt|soat)-[A-Za-z0-9_-]{20,}", 0),
    (
        "slack_webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9_/-]{8,})",
        re.IGNORECASE,
    ),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", 0),
    ("stripe_key", r"\b(?:[sr]k_(?:live|test)|whsec)_[A-Za-z0-9]{16,}", 0),
    ("google_api_key", r"\bAIza[A-Za-z0-9_-]{35}", 0),
    ("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA|ASCA)[A-Z0-9]{16}\b", 0),
    (
        "aws_secret_key",
        r"\b(?:aws[_-]?)?secret[_-]?access[_-]?key\\?[\"']?[ \t]*(?::=|=>|[:=])[ \t]*\\?[\"']?"
        r"(?P<secret>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        re.IGNORECASE,
    ),
    (
        "azure_storage_key",
        r"\b(?:Account|SharedAccess)Key[ \t]*=[ \t]*(?P<secret>[A-Za-z0-9+/]{16,}={0,2})",
        re.IGNORECASE,
    ),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{36,}", 0),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}", 0),
    ("sendgrid_api_key", r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}", 0),
    ("pypi_token", r"\bpypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,}", 0),
    (
        "url_credentials",
        r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,30}://[^\s:/?#@\[\]\"'<>]{0,256}:"
        rf"(?P<secret>{_NOT_PLACEHOLDER}[^\s/?#\"'<>]{{1,256}})@(?=[A-Za-z0-9\[])",
        0,
    ),
    (
        "bearer_token",
        rf"\bbearer[ \t]+(?P<secret>{_NOT_PLACEHOLDER}(?=[A-Za-z._~+/-]{{0,255}}+[0-9])[A-Za-z0-9._~+/-]{{16,}}=*)",
        re.IGNORECASE,
    ),
    (
        "bearer_token",
        r"\bauthorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?(?:token[ \t]+)?(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)",
        re.IGNORECASE,
    ),
    (
        "basic_auth",
        r"\bauthorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?basic[ \t]+(?P<secret>[A-Za-z0-9+/]{6,}={0,2})",
        re.IGNORECASE,
    ),
    (
        "basic_auth",
        r"curl\b(?:(?![ \t](?:-u|--user)[ \t=])[^\n;|&]){0,300}[ \t](?:-u|--user)(?:[ \t]+|=)[\"']?[^\s:\"']{1,128}:"
        rf"(?P<secret>{_NOT_PLACEHOLDER}[^\s\"']{{1,256}})",
        0,
    ),
    (  # ~/.netrc and _netrc: "machine HOST login USER password SECRET", on one line or several
        "netrc_password",
        r"\b(?:machine[ \t]+(?:[^\s.]{1,63}\.[^\s]{1,200}|[^\s]{1,253}(?=\s+login\b))|default(?=\s+login\b))"
        r"(?:\s+(?:login|account|port)[ \t]+[^\s]{1,256}){0,3}"
        rf"\s+password[ \t]+(?P<secret>{_NOT_PLACEHOLDER}[^\s]{{1,256}})",
        0,
    ),
    (  # ~/.docker/config.json: "auth" is base64 of user:password
        "docker_auth",
        r"\\?\"auth\\?\"[ \t]*:[ \t]*\\?\"(?P<secret>[A-Za-z0-9+/]{12,}={0,2})\\?\"",
        0,
    ),
    (  # Maven settings.xml and other XML: <password>SECRET</password>, never a ${property} reference; a
        # pretty-printed element keeps its indentation
        "xml_secret",
        r"<(?P<tag>[\w.-]{0,40}(?:password|passphrase|passwd|secret|token|api[_-]?key))>\s{0,80}"
        rf"(?P<secret>{_NOT_PLACEHOLDER}(?!\$\{{)[^<\s](?:[^<]{{0,510}}[^<\s])?)\s{{0,80}}</(?P=tag)>",
        re.IGNORECASE,
    ),
    (  # an HTTP Cookie / Set-Cookie header: the whole value (session ids are bearer credentials), also as a
        # quoted key and value in code or JSON ({"Cookie": "sid=..."})
        "cookie",
        r"\b(?:set-)?cookie\\?[\"']?[ \t]*:[ \t]*\\?[\"']?"
        rf"(?P<secret>{_NOT_PLACEHOLDER}(?=[^\r\n\"'`=]{{1,128}}=)[^\r\n\"'`]{{1,4096}})",
        re.IGNORECASE,
    ),
    (
        "cli_secret",
        r"(?<![\w-])--?(?:(?:[A-Za-z0-9]{1,20}[_-]){0,4}"
        r"(?i:pass(?:word|wd|phrase)?|token|secret|(?:api|access|private|auth|secret|client)[_-]?key)"
        r"|(?:src|dest)?(?:store|key)pass)"
        rf"[ \t]+[\"']?(?P<secret>{_CLI_VALUE})",
        0,
    ),
    (
        "cli_secret",
        rf"\b(?:mysql|mysqldump|mysqladmin|mariadb(?:-dump|-admin)?){_CLI_ARGUMENTS}-p[\"']?(?P<secret>{_CLI_VALUE})",
        0,
    ),
    (
        "cli_secret",
        rf"\b(?:sshpass|(?:docker|podman|buildah|skopeo|helm[ \t]+registry)[ \t]+login){_CLI_ARGUMENTS}-p"
        rf"(?:[ \t]+|=)?[\"']?(?P<secret>{_CLI_VALUE})",
        0,
    ),
)

_ASSIGNMENT_NAME = "secret_assignment"

PATTERN_NAMES: tuple[str, ...] = (*dict.fromkeys(name for name, _, _ in _RULES), _ASSIGNMENT_NAME)


def placeholder(name: str) -> str:
    """The text a secret of type ``name`` is replaced with."""
    return f"{_PLACEHOLDER_START}{name}]"


# --------------------------------------------------------------------------------------------------------------
# <private> tags
# --------------------------------------------------------------------------------------------------------------


@cache
def _tag_pattern() -> re.Pattern[str]:
    return re.compile(r"<[ \t]{0,8}(/?)[ \t]{0,8}private\b[^<>]{0,200}>", re.IGNORECASE)


def _private_spans(text: str) -> tuple[list[tuple[int, int]], bool]:
    """Spans to remove, and whether private text was seen. Tags nest and fail closed: an opening tag never closed
    hides the rest of the text, and a closing tag never opened hides everything before it (the text is the end of
    a private part whose start was cut off: a file read from an offset, the tail of an output). A self-closing
    ``<private/>`` is removed on its own."""
    spans: list[tuple[int, int]] = []
    depth, start, opened = 0, 0, False
    for match in _tag_pattern().finditer(text):
        closing = match.group(1) == "/"
        self_closing = not closing and match.group(0).endswith("/>")
        if depth == 0:
            if closing:
                opened = opened or bool(text[: match.start()].strip())
                spans = [(0, match.end())]
            elif self_closing:
                spans.append(match.span())
            else:
                depth, start, opened = 1, match.start(), True
        elif closing:
            depth -= 1
            if depth == 0:
                spans.append((start, match.end()))
        elif not self_closing:
            depth += 1
    if depth:
        spans.append((start, len(text)))
    return spans, opened


def _merge_whitespace(before: str, after: str) -> str:
    """One run of whitespace standing for the two runs that surrounded removed text: the one with more line breaks
    wins (the later one on a tie, so the next line keeps its indentation); on a single line, the earlier one."""
    if "\n" in before or "\n" in after:
        return before if before.count("\n") > after.count("\n") else after
    return before or after


def _assemble(pieces: list[str]) -> str:
    """Join the text kept between removed spans, collapsing the whitespace each removal leaves behind."""
    out: list[str] = []
    carry: str | None = None  # whitespace waiting for the next kept content; None while nothing was kept
    for index, piece in enumerate(pieces):
        core = piece.strip()
        if not core:
            if carry is not None:
                carry = _merge_whitespace(carry, piece)
            continue
        lead = piece[: len(piece) - len(piece.lstrip())]
        if carry is None:
            out.append(lead if index == 0 else "")
        else:
            out.append(_merge_whitespace(carry, lead))
        out.append(core)
        carry = piece[len(piece.rstrip()) :]
    if carry:
        # Trailing whitespace of the text is kept as it was; after a removal at the end only line breaks stay.
        out.append(carry if pieces[-1].strip() else carry.strip(" \t"))
    return "".join(out)


def strip_private(text: str) -> str:
    """Remove every ``<private>…</private>`` part of ``text`` (tag names in any case, across lines, nested)."""
    if "<" not in text:
        return text
    spans, _ = _private_spans(text)
    if not spans:
        return text
    pieces: list[str] = []
    position = 0
    for start, end in spans:
        pieces.append(text[position:start])
        position = end
    pieces.append(text[position:])
    return _assemble(pieces)


def is_entirely_private(text: str) -> bool:
    """True when ``text`` holds a ``<private>`` tag and nothing but whitespace is left once private parts go."""
    if "<" not in text:
        return False
    _, opened = _private_spans(text)
    return opened and not strip_private(text).strip()


# --------------------------------------------------------------------------------------------------------------
# Secrets in assignments: ``password = "…"``, ``"api_key": "…"``, ``export DB_PASSWORD=…``
# --------------------------------------------------------------------------------------------------------------

_KEY_WORDS = (
    r"pass(?:word|wd|phrase)?|pwd|secret|token|credentials?"
    r"|(?:api|access|private|auth|secret|signing|encryption|master|session|client)[_-]?key"
)
_VALUE_STOPS = r"\s\"'`,;(){}\[\]<>&"


_KEY = r"(?<![\w.-])(?P<key>-{0,2}[A-Za-z_][\w.-]{0,63}+)(?<=ss|wd|rd|se|et|en|al|ls|ey|SS|WD|RD|SE|ET|EN|AL|LS|EY)"
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
        key_suffix=re.compile(rf"(?:^|[_.-]|(?<=[a-z0-9])(?=[A-Z]))(?i:{_KEY_WORDS})$"),
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


def _quoted_is_secret(inner: str) -> bool:
    """A quoted literal is a secret unless it is empty or a template (``${X}``, ``{{ x }}``, ``%(x)s``, ``<x>``)."""
    stripped = inner.strip()
    return bool(stripped) and not stripped.startswith((_PLACEHOLDER_START, "$", "{", "%(", "<", "#{"))


_ENV_MIN_LENGTH = 4
_ENV_LITERALS = frozenset({"true", "false", "none", "null", "nil", "unset", "empty"})


def _is_env_literal(value: str) -> bool:
    return value.isdigit() or value.lower() in _ENV_LITERALS


def _bare_is_secret(match: re.Match[str], text: str, value: str, end: int) -> bool:
    """An unquoted value is a secret when it is long enough and does not read as code: a call, an index, an
    attribute, a variable reference, or (outside env and YAML lines) a plain identifier without digits. In an
    env line (``PGPASSWORD=hunter2``) a shorter value counts too, unless it is a number or a literal."""
    env_style = _is_env_style(match, text)
    if len(value) < (_ENV_MIN_LENGTH if env_style else 8) or value.startswith(("$", "%")):
        return False
    if text[end : end + 1] in ("(", "[") or (env_style and len(value) < 8 and _is_env_literal(value)):
        return False
    if _assignment_regexes().identifier.fullmatch(value) is None:
        return True
    if env_style:
        return True
    if "." in value:
        return False
    if any(char.isdigit() for char in value):
        return True
    looks_like_type = value[0].isupper() and not value.isupper()
    return not looks_like_type and _is_yaml_style(match, text, end)


def _is_secret_key(key: str) -> bool:
    """Whether ``key`` names a secret: it ends in a key word (``db_password``, ``apiKey``), or it is an upper-case
    environment name that runs one in (``PGPASSWORD``, ``NPMTOKEN``)."""
    if key.lower() == "pwd":
        return False
    if _assignment_regexes().key_suffix.search(key) is not None:
        return True
    return key.isupper() and key.endswith(("PASSWORD", "PASSWD", "SECRET", "TOKEN"))


def _assignment_secret_span(match: re.Match[str], text: str) -> tuple[int, int] | None:
    key = match.group("key")
    if not _is_secret_key(key):
        return None
    quoted = match.group("quoted")
    if quoted is not None:
        start = match.start("quoted")
        quote_at = next(i for i, char in enumerate(quoted) if char in "\"'`")
        closing = 2 if quoted.startswith("\\") else 1  # JSON inside a JSON string: \"value\"
        inner = quoted[quote_at + 1 : -closing]
        return (start + quote_at + 1, start + len(quoted) - closing) if _quoted_is_secret(inner) else None
    value, start = match.group("bare"), match.start("bare")
    end = start + len(value)
    return (start, end) if _bare_is_secret(match, text, value, end) else None


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


# --------------------------------------------------------------------------------------------------------------
# Token formats
# --------------------------------------------------------------------------------------------------------------


def _replacement(marker: str, has_secret_group: bool) -> Callable[[re.Match[str]], str]:
    if not has_secret_group:
        return lambda match: marker

    def replace(match: re.Match[str]) -> str:
        whole, base = match.group(0), match.start()
        start, end = match.span("secret")
        return whole[: start - base] + marker + whole[end - base :]

    return replace


@cache
def _encoded_pem_pattern() -> re.Pattern[str]:
    """Base64 of a PEM block (``LS0tLS1CRUdJTi`` is ``-----BEGIN``) on one line, as in a kubeconfig's
    ``client-key-data``, or wrapped (``base64 key.pem``): later lines are taken while they are base64 alone."""
    return re.compile(
        r"(?<![A-Za-z0-9+/])LS0tLS1CRUdJTi[A-Za-z0-9+/]{0,65536}+={0,2}"
        r"(?:\r?\n[ \t]{0,16}+[A-Za-z0-9+/]{16,200}+={0,2}(?![^\r\n]))*+"
    )


def _is_encoded_private_key(encoded: str) -> bool:
    head = re.sub(r"\s", "", encoded)[:60]
    try:
        decoded = base64.b64decode(head[: len(head) // 4 * 4])
    except ValueError:
        return False
    return b"PRIVATE KEY" in decoded


def _redact_encoded_keys(text: str) -> tuple[str, int]:
    """Replace the base64 of private keys (never of certificates or public keys) with the private key placeholder."""
    if "LS0tLS1CRUdJTi" not in text:
        return text, 0
    marker, count = placeholder("private_key"), 0

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        if not _is_encoded_private_key(match.group(0)):
            return match.group(0)
        count += 1
        return marker

    return _encoded_pem_pattern().sub(replace, text), count


@cache
def _compiled_rules() -> tuple[tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]], ...]:
    rules = []
    for name, source, flags in _RULES:
        pattern = re.compile(source, flags)
        rules.append((name, pattern, _replacement(placeholder(name), "secret" in pattern.groupindex)))
    return tuple(rules)


def _redact_once(text: str, counts: dict[str, int]) -> tuple[str, bool]:
    changed = False
    for name, pattern, replace in _compiled_rules():
        text, hits = pattern.subn(replace, text)
        if hits:
            counts[name] = counts.get(name, 0) + hits
            changed = True
    text, hits = _redact_encoded_keys(text)
    if hits:
        counts["private_key"] = counts.get("private_key", 0) + hits
        changed = True
    text, hits = _redact_assignments(text)
    if hits:
        counts[_ASSIGNMENT_NAME] = counts.get(_ASSIGNMENT_NAME, 0) + hits
        changed = True
    return text, changed


def redact_with_counts(text: str) -> tuple[str, dict[str, int]]:
    """``text`` with every secret replaced by its placeholder, and how many of each type were replaced.

    Passes repeat until nothing changes (a bounded number of times), so redacting the result again is a no-op
    even when one replacement exposes a match for a rule that ran earlier."""
    counts: dict[str, int] = {}
    for _ in range(_MAX_PASSES):
        text, changed = _redact_once(text, counts)
        if not changed:
            break
    return text, counts


def redact_secrets(text: str) -> str:
    """``text`` with every secret replaced by a typed placeholder such as ``[REDACTED:aws_access_key]``."""
    return redact_with_counts(text)[0]


# --------------------------------------------------------------------------------------------------------------
# Whole events
# --------------------------------------------------------------------------------------------------------------


def scrub(value: Any) -> Any:
    """A copy of ``value`` with private parts and secrets removed from every string inside it (dict keys kept)."""
    if isinstance(value, str):
        return redact_secrets(strip_private(value))
    if isinstance(value, dict):
        return {key: scrub(item) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub(item) for item in value]
    if isinstance(value, tuple):
        items = [scrub(item) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value
