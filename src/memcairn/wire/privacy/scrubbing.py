"""Whole events scrubbed: keys and values read together at any depth, every string redacted as text."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from memcairn.wire.json_depth import MAX_DEPTH, cut_marker
from memcairn.wire.privacy.assignments import _is_secret_key, _is_weak_key, _quoted_is_secret, _token_shaped
from memcairn.wire.privacy.private_tags import strip_private
from memcairn.wire.privacy.redaction import redact_secrets
from memcairn.wire.privacy.rules import _ASSIGNMENT_NAME, placeholder
from memcairn.wire.protocol import ENVELOPE_FIELDS

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
