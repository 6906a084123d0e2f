"""Secrets in prose: "my db password is hunter2", "set the token to `abc123…`"."""

from __future__ import annotations

import re
from functools import cache

from memcairn.wire.privacy.assignments import _is_masked
from memcairn.wire.privacy.rules import _NOT_PLACEHOLDER, placeholder

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

