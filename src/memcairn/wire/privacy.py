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

from memcairn.wire.json_depth import MAX_DEPTH, cut_marker
from memcairn.wire.protocol import ENVELOPE_FIELDS

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
    # Formats after gitleaks' rule list (https://github.com/gitleaks/gitleaks, config/gitleaks.toml, MIT License,
    # Copyright (c) 2019 Zachary Rice): each a fixed prefix, so a scan costs little.
    ("age_secret_key", r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}\b", 0),
    ("twilio_api_key", r"\bSK[0-9a-fA-F]{32}\b", 0),
    ("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}\b", 0),
    ("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b", 0),
    ("databricks_token", r"\bdapi[a-f0-9]{32}(?:-\d)?\b", 0),
    ("linear_api_key", r"\blin_api_[A-Za-z0-9]{40}\b", 0),
    ("postman_api_key", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b", 0),
    ("grafana_token", r"\b(?:glc_[A-Za-z0-9+/]{32,400}={0,2}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})", 0),
    ("doppler_token", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}\b", 0),
    ("pulumi_token", r"\bpul-[a-f0-9]{40}\b", 0),
    ("atlassian_token", r"\bATATT3[A-Za-z0-9_=-]{180,200}", 0),
    ("mailgun_key", r"\bkey-[a-f0-9]{32}\b", 0),
    (  # a GCP service account file names its key: the key's id is enough to ask for it
        "gcp_private_key_id",
        r"\bprivate_key_id\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?(?P<secret>[0-9a-f]{40})\b",
        0,
    ),
    (  # crypt(3) and htpasswd hashes (bcrypt, apr1-MD5, SHA-crypt, yescrypt; {SHA} after a user name): each can
        # be cracked offline, so the hash is a credential
        "password_hash",
        r"(?<![\w$])\$(?:2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}|apr1\$[./A-Za-z0-9]{1,8}\$[./A-Za-z0-9]{22}"
        r"|[156]\$(?:rounds=\d{1,9}\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{22,86}"
        r"|y\$[./A-Za-z0-9]{1,32}\$[./A-Za-z0-9]{1,64}\$[./A-Za-z0-9]{43})"
        r"|(?<=:)\{S?SHA\}[A-Za-z0-9+/]{27,}={0,2}",
        0,
    ),
    (  # ~/.pgpass: hostname:port:database:username:password, a whole line
        "pgpass_password",
        r"(?m)^[ \t]{0,8}(?:[A-Za-z0-9*][A-Za-z0-9.*-]{0,252}|\[[0-9A-Fa-f:]{2,39}\]):(?:\d{1,5}|\*)"
        rf":[^\s:]{{1,63}}:[^\s:]{{1,63}}:(?P<secret>{_NOT_PLACEHOLDER}[^\s:]{{1,256}})[ \t]*\r?$",
        0,
    ),
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
    (  # echo SECRET | docker login --password-stdin (a variable or a file is no secret of its own)
        "cli_secret",
        r"\b(?:echo|printf)(?:[ \t]+-[neE]{1,3})?[ \t]+[\"']?"
        rf"(?P<secret>{_NOT_PLACEHOLDER}(?![$%`(<])[^\s\"'`|;&]{{1,256}})[\"']?[ \t]*\|[ \t]*(?:sudo[ \t]+)?"
        r"(?:docker|podman|buildah|skopeo|nerdctl|oras|crane|helm)\b[^\n|;&]{0,300}--password-stdin",
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

_AWS_PREFIXES = ("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "APKA", "AROA", "ASCA")
# A rule runs only on text holding one of its gate's strings (a substring test costs far less than a regex scan
# over text that cannot match; most text holds no token prefix at all).
_GATE_MIN = 400
_GATES: dict[str, tuple[str, ...]] = {
    "private_key": ("PRIVATE KEY",),
    "jwt": ("eyJ",),
    "anthropic_api_key": ("sk-ant-",),
    "openai_api_key": ("sk-",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "github_fine_grained_token": ("github_pat_",),
    "gitlab_token": ("glpat-", "gldt-", "glrt-", "glptt-", "glsoat-"),
    "slack_token": ("xox",),
    "stripe_key": ("k_live_", "k_test_", "whsec_"),
    "google_api_key": ("AIza",),
    "aws_access_key": _AWS_PREFIXES,
    "npm_token": ("npm_",),
    "age_secret_key": ("AGE-SECRET-KEY-1",),
    "twilio_api_key": ("SK",),
    "digitalocean_token": ("_v1_",),
    "shopify_token": ("shpat_", "shpca_", "shppa_", "shpss_"),
    "databricks_token": ("dapi",),
    "linear_api_key": ("lin_api_",),
    "postman_api_key": ("PMAK-",),
    "grafana_token": ("glc_", "glsa_"),
    "doppler_token": ("dp.",),
    "pulumi_token": ("pul-",),
    "atlassian_token": ("ATATT3",),
    "mailgun_key": ("key-",),
    "gcp_private_key_id": ("private_key_id",),
    "password_hash": ("$", "{S"),
    "huggingface_token": ("hf_",),
    "sendgrid_api_key": ("SG.",),
    "pypi_token": ("pypi-AgE",),
    "docker_auth": ("auth",),
    "xml_secret": ("<",),
    "netrc_password": ("password",),
}

PATTERN_NAMES: tuple[str, ...] = (*dict.fromkeys(name for name, _, _ in _RULES), _ASSIGNMENT_NAME, "prose_secret")


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


# --------------------------------------------------------------------------------------------------------------
# Secrets in prose: "my db password is hunter2", "set the token to `abc123…`"
# --------------------------------------------------------------------------------------------------------------

_PROSE_NAME = "prose_secret"
# Names of algorithms and encodings: "the password is sha256-hashed" names how, not what.
_PROSE_WORDS = ("sha", "md5", "base64", "utf", "argon2", "pbkdf2", "aes", "rsa", "ed25519", "hmac", "bcrypt",
                "scrypt", "x509", "pkcs", "oauth", "http", "rot13", "hex")


@cache
def _prose_pattern() -> re.Pattern[str]:
    return re.compile(
        r"(?i:\b(?P<what>pass(?:word|phrase|wd|code)|pin|api[ _-]?key|secret(?:[ _-]key)?"
        r"|(?:access|auth|api|bearer)[ _-]?token|token))"
        r"(?:[ \t]+(?:for|of|on|to)[ \t]+[\w.@:/-]{1,64}+)?"
        r"[ \t]+(?P<verb>(?i:is(?:[ \t]+now|[ \t]+set[ \t]+to)?|was|(?:set|changed|reset)[ \t]+to|to))[ \t]*:?[ \t]+"
        rf"(?P<quote>[\"'`]?)(?P<secret>{_NOT_PLACEHOLDER}[^\s\"'`]{{1,128}}+)"
    )


def _prose_value_is_secret(value: str, what: str, quoted: bool) -> bool:
    """A word after "password is" is a secret when it reads as one: quoted, or holding a digit or a symbol besides
    letters, or a capital after a small letter (``swOrdfish``); a number only after "password" or "pin". Plain
    words ("the token is expired", "JWT-based"), references, paths, URLs and masks are not."""
    if len(value) < 4 or value.startswith(("$", "%", "{", "<", "[", "(", "/", "~", "-")) or "://" in value:
        return False
    if _is_masked(value) or value.lower().startswith(_PROSE_WORDS):
        return False
    if value.isdigit():
        return what.lower().startswith(("pass", "pin"))
    if quoted:
        return True
    letters = any(char.isalpha() for char in value)
    marked = any(char.isdigit() for char in value) or not value.replace("-", "").isalnum()
    return letters and (marked or any(a.islower() and b.isupper() for a, b in zip(value, value[1:], strict=False)))


_PROSE_GATE = ("pass", "pin", "key", "secret", "token")


def _redact_prose(text: str) -> tuple[str, int]:
    lowered = text.lower()
    if not any(word in lowered for word in _PROSE_GATE):
        return text, 0
    count = 0
    marker = placeholder(_PROSE_NAME)

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        whole, base = match.group(0), match.start()
        value = match.group("secret")
        quote = match.group("quote")
        if quote and quote in value:
            value = value[: value.index(quote)]
        elif not quote:
            value = value.rstrip(".,;:!?)")
        what = match.group("what")
        if match.group("verb").lower() == "to" and not what.lower().startswith("pass"):
            return whole  # "pin to v2.3.4", "token to use": only a password is changed *to* something
        if not _prose_value_is_secret(value, what, bool(quote)):
            return whole
        count += 1
        start = match.start("secret") - base
        return whole[:start] + marker + whole[start + len(value) :]

    return _prose_pattern().sub(replace, text), count


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


_Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str]], str], tuple[str, ...]]
_PREFIXES = "_prefixes"  # the token formats that are a fixed prefix and nothing else, scanned as one pattern
# The first characters of those formats: the one pattern tests this class before its branches, which makes its
# scan several times cheaper than one scan per format (a test per format fails if a character is missing).
_PREFIX_FIRST = "[eAsgxrwnhSdlPpk]"


def _is_prefix_rule(name: str, source: str, flags: int) -> bool:
    return not flags and source.startswith(r"\b") and "(?P<" not in source and name in _GATES


@cache
def _compiled_rules() -> tuple[_Rule, ...]:
    rules: list[_Rule | None] = []  # None: where the prefixes' pattern runs (where the first of them stands)
    branches: list[str] = []
    for name, source, flags in _RULES:
        if _is_prefix_rule(name, source, flags):
            if not branches:
                rules.append(None)
            branches.append(f"(?P<{name}>{source})")
            continue
        pattern = re.compile(source, flags)
        replace = _replacement(placeholder(name), "secret" in pattern.groupindex)
        rules.append((name, pattern, replace, _GATES.get(name, ())))
    combined = re.compile(f"(?={_PREFIX_FIRST})(?:{'|'.join(branches)})")
    return tuple(rule or (_PREFIXES, combined, _replace_prefixed, ()) for rule in rules)


def _replace_prefixed(match: re.Match[str]) -> str:
    return placeholder(str(match.lastgroup))


def _redact_once(text: str, counts: dict[str, int], depth: int) -> tuple[str, bool]:
    changed = False
    gated = len(text) > _GATE_MIN  # on short text the scan costs less than the test
    for name, pattern, replace, gate in _compiled_rules():
        if gated and gate and not any(part in text for part in gate):
            continue
        if name == _PREFIXES:
            found = [match.lastgroup for match in pattern.finditer(text)]
            if found:
                text = pattern.sub(replace, text)
                for kind in found:
                    counts[str(kind)] = counts.get(str(kind), 0) + 1
                changed = True
            continue
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
    text, hits = _redact_prose(text)
    if hits:
        counts[_PROSE_NAME] = counts.get(_PROSE_NAME, 0) + hits
        changed = True
    text, hits = _redact_encoded_secrets(text, depth)
    if hits:
        counts["base64_secret"] = counts.get("base64_secret", 0) + hits
        changed = True
    return text, changed


def redact_with_counts(text: str) -> tuple[str, dict[str, int]]:
    """``text`` with every secret replaced by its placeholder, and how many of each type were replaced.

    Passes repeat until nothing changes (a bounded number of times), so redacting the result again is a no-op
    even when one replacement exposes a match for a rule that ran earlier."""
    return _redact_counts(text, 0)


def _redact_counts(text: str, depth: int) -> tuple[str, dict[str, int]]:
    counts: dict[str, int] = {}
    for _ in range(_MAX_PASSES):
        text, changed = _redact_once(text, counts, depth)
        if not changed:
            break
    return text, counts


def redact_secrets(text: str) -> str:
    """``text`` with every secret replaced by a typed placeholder such as ``[REDACTED:aws_access_key]``."""
    return redact_with_counts(text)[0]


# --------------------------------------------------------------------------------------------------------------
# Base64 of a secret: ``Z2hwX...`` (a ``ghp_`` token), the base64 of ``aws_secret_access_key=...``
# --------------------------------------------------------------------------------------------------------------

_BASE64_MIN = 20  # the base64 of the shortest secret the rules know (``token=abcdefgh``, 14 bytes)
_BASE64_MAX = 65_536  # longer runs are data (an image, an archive), not a credential; they are left as they are
_BASE64_DEPTH = 2  # base64 of base64 of a secret is still found; deeper nesting is not looked into


@cache
def _base64_pattern() -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{{{_BASE64_MIN},{_BASE64_MAX}}}+={{0,2}}"
                      r"(?![A-Za-z0-9+/=_-])")


def _decoded_text(run: str) -> str | None:
    """The text ``run`` is the base64 (standard or URL-safe) of, or None when it decodes to no printable text."""
    core = run.rstrip("=")
    if len(core) % 4 == 1:
        return None
    try:
        raw = base64.b64decode(core.replace("-", "+").replace("_", "/") + "=" * (-len(core) % 4), validate=True)
        text = raw.decode("utf-8")
    except ValueError:
        return None
    return text if text.isprintable() or all(c.isprintable() or c in "\t\r\n" for c in text) else None


def _redact_encoded_secrets(text: str, depth: int) -> tuple[str, int]:
    """Replace a base64 run whose decoded text holds a secret with the placeholder of that secret's type.

    Runs of the base64 alphabet are common (hashes, identifiers, paths of letters and slashes); they are
    decoded and dropped at once unless they decode to printable UTF-8, so this costs little besides the
    regex scan. Only such text is redacted, with every rule (a ``ghp_`` token, ``aws_secret_access_key=...``,
    a JSON object holding ``"password"``)."""
    if depth >= _BASE64_DEPTH:
        return text, 0
    count = 0

    def replace(match: re.Match[str]) -> str:
        nonlocal count
        run = match.group(0)
        if run.isalpha() and (run.islower() or run.isupper()):
            return run  # a word or a constant name, no base64 of text
        decoded = _decoded_text(run)
        if decoded is None:
            return run
        _, counts = _redact_counts(decoded, depth + 1)
        if not counts:
            return run
        count += 1
        return placeholder(next(iter(counts)))

    return _base64_pattern().sub(replace, text), count


# --------------------------------------------------------------------------------------------------------------
# Whole events
# --------------------------------------------------------------------------------------------------------------


# Keys whose value is a credential although they end in no key word: HTTP headers kept as a mapping.
_SECRET_HEADER_KEYS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
# ``{"name": "API_KEY", "value": "..."}``: an environment list (Kubernetes, ECS, GitHub Actions) names the
# secret in one field and holds it in another.
# AWS SSM's ``{"Name": "/prod/db/password", "Value": ...}`` and CloudFormation's ``ParameterKey`` too.
_PAIR_NAME_FIELDS = ("name", "key", "Name", "Key", "ParameterKey", "field", "label")
_PAIR_VALUE_FIELDS = ("value", "Value", "ParameterValue", "data")
_KEY_REDACT_MIN = 12  # a key shorter than this holds no token any rule knows (the shortest is 15 characters)
_JSON_TEXT_MAX = 2 * 1024 * 1024  # text longer than this is redacted as text only


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a credential, so that its value is one whatever it looks like.

    The rule is the assignment rule's: the key *ends* in a key word (``password``, ``passwd``, ``passphrase``,
    ``pwd`` but not ``PWD``, ``secret``, ``token``, ``credential(s)``, ``api_key``, ``access_key``, ``private_key``,
    ``client_key``, ...) at a word boundary (``db_password``, ``apiKey``, ``client_secret``,
    ``AWS_SECRET_ACCESS_KEY``), or is an upper-case environment name running one in (``PGPASSWORD``); plus the
    ``Authorization`` and ``Cookie`` headers. A key word in the middle names something about a secret, not the
    secret: ``token_count``, ``max_tokens``, ``password_policy_url``, ``secret_name``, ``tokenizer`` are kept."""
    return key.strip().lower() in _SECRET_HEADER_KEYS or _is_secret_key(key.strip())


def _secret_value(value: Any) -> bool:
    """Whether a value held under a secret key is to be redacted: text other than blank, a placeholder or a
    reference (``${DB_PASSWORD}``, ``{{ vault }}``); a number of four digits or more (a PIN). ``true``,
    ``false`` and ``null`` say nothing secret."""
    if isinstance(value, str):
        return _quoted_is_secret(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return len(str(value)) >= 4
    return False


def _redact_all(value: Any, depth: int) -> Any:
    """``value`` held under a secret key: every scalar inside it that could be secret becomes the placeholder
    (fail closed: ``{"credentials": {"user": ..., "password": ...}}`` keeps its shape, none of its values)."""
    if depth > MAX_DEPTH:
        return cut_marker()
    if isinstance(value, dict):
        return {_scrub_key(key): _redact_all(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_all(item, depth + 1) for item in value]
    return placeholder(_ASSIGNMENT_NAME) if _secret_value(value) else value


def _scrub_key(key: Any) -> Any:
    """A mapping key with any token in it redacted (a ``ghp_`` token used as a key of a cache, a map of tokens)."""
    if isinstance(key, str) and len(key) >= _KEY_REDACT_MIN:
        return redact_secrets(key)
    return key


def _pair_name(value: dict[Any, Any]) -> str | None:
    """The name a ``{"name": ..., "value": ...}`` pair gives its value: the last part of a path
    (``/prod/db/password``), words joined (``DB password`` → ``DB_password``)."""
    for field in _PAIR_NAME_FIELDS:
        name = value.get(field)
        if isinstance(name, str) and any(f in value for f in _PAIR_VALUE_FIELDS):
            return "_".join(re.split(r"[/:]", name.strip())[-1].split())
    return None


def _weak_secret(key: Any, value: Any) -> bool:
    """A token under a name that only may hold one: ``{"STRIPE_KEY": "…"}``."""
    return isinstance(key, str) and isinstance(value, str) and _is_weak_key(key) and _token_shaped(value)


def _scrub_dict(value: dict[Any, Any], depth: int, leaf: Callable[[Any, int], Any]) -> dict[Any, Any]:
    named = _pair_name(value)
    pair_secret = named is not None and is_secret_key(named)
    out: dict[Any, Any] = {}
    for key, item in value.items():
        secret = isinstance(key, str) and (is_secret_key(key) or (pair_secret and key in _PAIR_VALUE_FIELDS))
        clean = _redact_all(item, depth + 1) if secret or _weak_secret(key, item) else leaf(item, depth + 1)
        new_key = _scrub_key(key)
        while new_key in out:  # two keys redacted to the same placeholder both stay
            new_key = f"{new_key}~"
        out[new_key] = clean
    return out


def _needs_structured_scrub(value: Any, depth: int) -> bool:
    """Whether parsed JSON holds what text redaction cannot see: a value under a secret key that is still there,
    a key holding a token, nesting deeper than ``MAX_DEPTH``. Walks containers only (no text is redacted)."""
    stack = [(value, depth)]
    while stack:
        current, level = stack.pop()
        if level > MAX_DEPTH:
            return True
        if isinstance(current, dict):
            named = _pair_name(current)
            pair_secret = named is not None and is_secret_key(named)
            for key, item in current.items():
                if isinstance(key, str) and (is_secret_key(key) or (pair_secret and key in _PAIR_VALUE_FIELDS)):
                    if _secret_value(item) or isinstance(item, dict | list):
                        return True
                if _weak_secret(key, item):
                    return True
                if _scrub_key(key) != key:
                    return True
                stack.append((item, level + 1))
        elif isinstance(current, list):
            stack.extend((item, level + 1) for item in current)
    return False


def _scrub_json_text(text: str, depth: int) -> str | None:
    """Text that is a JSON object or array (a tool's answer often is), read as JSON so that keys and values are
    seen together. When it holds what text redaction cannot see (``_needs_structured_scrub``), its keys and
    the values under secret keys are scrubbed in the parsed value, which is written again (indented when it
    was) for the text rules to redact the rest. None for other text and for JSON with nothing of the kind:
    those are redacted as text, unchanged otherwise."""
    stripped = text.strip()
    if not stripped or len(stripped) > _JSON_TEXT_MAX or stripped[0] not in "{[" or stripped[-1] not in "}]":
        return None
    import json

    try:
        parsed = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict | list) or not _needs_structured_scrub(parsed, depth):
        return None
    return json.dumps(_scrub_structure(parsed, depth), ensure_ascii=False, indent=2 if "\n" in stripped else None)


def _scrub_structure(value: Any, depth: int) -> Any:
    """Keys, values under secret keys and depth only: the strings are redacted afterwards, as one text."""
    if depth > MAX_DEPTH:
        return cut_marker()
    if isinstance(value, str):
        nested = _scrub_json_text(value, depth)
        return value if nested is None else nested
    if isinstance(value, dict):
        return _scrub_dict(value, depth, _scrub_structure)
    if isinstance(value, list):
        return [_scrub_structure(item, depth + 1) for item in value]
    return value


def _scrub_text(text: str, depth: int) -> str:
    text = strip_private(text)
    structured = _scrub_json_text(text, depth)
    return redact_secrets(text if structured is None else structured)


def _scrub(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        return cut_marker()
    if isinstance(value, str):
        return _scrub_text(value, depth)
    if isinstance(value, dict):
        return _scrub_dict(value, depth, _scrub)
    if isinstance(value, list):
        return [_scrub(item, depth + 1) for item in value]
    if isinstance(value, tuple):
        items = [_scrub(item, depth + 1) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


def scrub_event(body: dict[str, Any]) -> dict[str, Any]:
    """An event's body cleaned as ``scrub`` cleans it, but for the fields that name and route it
    (``protocol.ENVELOPE_FIELDS``): for an event that rests in the spool before admission reads it."""
    clean = scrub(body)
    if isinstance(clean, dict):
        clean.update({name: body[name] for name in ENVELOPE_FIELDS if name in body})
    return clean


def scrub(value: Any) -> Any:
    """A copy of ``value`` with private parts and secrets removed everywhere inside it.

    Keys and values are read together at every depth: a value under a key naming a secret (``is_secret_key``)
    is redacted whatever it looks like, and so is the ``value`` of a ``{"name": "API_KEY", "value": ...}``
    pair; keys are redacted too (a token used as a key). Every string is redacted as text (the token formats,
    ``key = value`` assignments, base64 of a secret) and, when it is JSON text, as JSON. Containers nested
    deeper than ``MAX_DEPTH`` levels are replaced by ``cut_marker()``: nothing recurses without bound."""
    return _scrub(value, 0)
