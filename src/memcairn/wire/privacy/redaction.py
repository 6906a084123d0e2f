"""Text redaction: every rule run over text until nothing changes, private keys and secrets in base64 included."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from functools import cache

from memcairn.wire.privacy.assignments import _redact_assignments
from memcairn.wire.privacy.prose import _PROSE_NAME, _redact_prose
from memcairn.wire.privacy.rules import _ASSIGNMENT_NAME, _GATE_MIN, _GATES, _RULES, placeholder

_MAX_PASSES = 3


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
