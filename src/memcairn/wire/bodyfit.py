"""A hook body fitted under the worker's size limit, with no half of a secret left where a string was cut.

Used by the hooks (every event, standard library only) and by the transcript importer. The redaction
(``capture.privacy``) and ``re`` are imported on the first cut only, so an ordinary event never loads them (a
hook does without ``re`` otherwise).
"""

from __future__ import annotations

from memcairn.wire.fastjson import encode_json
from memcairn.wire.protocol import HOOK_BODY_BYTES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

CUT_MARKER = "\n… [{n} characters cut by memcairn]"  # on its own line: see cut_redacted
CUT_CONTEXT = 1_024  # before the cut: what a secret's pattern reads ahead of its value (a key, ``curl ... -u``)
CUT_LOOKAHEAD = 1_024  # past the cut: the rest of a bounded secret of several words (a quoted value, an XML element)
CUT_TOKEN_REACH = 16_384  # past that: how far the end of the token there is looked for
CUT_REDACT_BUDGET = 500_000  # characters redacted for the cuts of one event, at most (~0.25 s)
STRING_CAPS = (16_000, 4_000, 1_000, 200)  # the string lengths tried, longest first, until a body fits
_PLACEHOLDER_START = "[REDACTED:"  # privacy.placeholder's opening


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b`` (slice comparisons, not a character loop)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _without_open_placeholder(text: str) -> str:
    """``text`` without a placeholder it ends in the middle of (``… [REDACTED:github_``, or a lone ``[``)."""
    start = text.rfind(_PLACEHOLDER_START)
    if start >= 0 and "]" not in text[start:]:
        return text[:start]
    for size in range(len(_PLACEHOLDER_START) - 1, 0, -1):
        if text.endswith(_PLACEHOLDER_START[:size]):
            return text[:-size]
    return text


class Budget:
    """What is left of ``CUT_REDACT_BUDGET`` for one event's cuts, and where a failed redaction is reported."""

    def __init__(self, warn: Callable[[str], None] | None = None) -> None:
        self.chars = CUT_REDACT_BUDGET
        self.warn = warn

    def take(self, chars: int) -> bool:
        if chars > self.chars:
            return False
        self.chars -= chars
        return True


def _window_start(text: str, cap: int) -> int:
    """Where the text redacted around a cut starts: at least ``CUT_CONTEXT`` characters before it, at the start
    of a line when one starts in the ``3 * CUT_CONTEXT`` characters before that, else after a whitespace (never
    inside a token), else at the very start."""
    latest = cap - CUT_CONTEXT
    if latest <= 0:
        return 0
    import re

    for pattern in (r"\n", r"\s"):
        found = [m.end() for m in re.finditer(pattern, text[max(0, latest - 3 * CUT_CONTEXT):latest])]
        if found:
            return max(0, latest - 3 * CUT_CONTEXT) + found[-1]
    return 0


def cut_redacted(text: str, cap: int, budget: Budget) -> str:
    """``text`` (longer than ``cap``) cut to about ``cap`` characters, then a marker; no part of a secret that
    straddles the cut is kept.

    The worker redacts secrets (``capture.privacy``), but only what it is sent: a token cut in half no longer
    matches its pattern, so a plain cut would let half a secret through. The cut therefore redacts around the
    cut, with the worker's own rules, before cutting (the transcript importer redacts the whole body first; a
    hook must stay fast):

    - ``near``, the text from a line start at least ``CUT_CONTEXT`` characters before the cut up to the cut, is
      redacted: what a secret's pattern needs to see ahead of its value (a key, a header name, a command) is in
      it, and a token never begins before it (``_window_start``);
    - so is a window from the same start to ``CUT_LOOKAHEAD`` characters past the cut and on to the end of the
      token there (at most ``CUT_TOKEN_REACH`` more): any secret straddling the cut is whole in it;
    - what is kept of ``near`` is the part both agree on: all of it, redacted, when the window's redaction starts
      with it, else their common prefix, which stops where a secret straddling the cut begins (never in the middle
      of a placeholder). A straddling secret is thus dropped entirely, and one that ``near`` recognises only in
      part (a truncated private key, a cookie) is sent redacted.
    - The text before ``near`` is sent as it is: the worker redacts it with all its context, as it always did.

    A secret whose pattern needs more than ``CUT_TOKEN_REACH`` characters past the cut (a JWT with a longer
    segment), or a straddling value whose key stands more than ``CUT_CONTEXT`` characters before the cut (a
    longer cookie header, a private key block) is left to the worker: its patterns recognise those in part.

    Why redaction in the hook rather than only cutting at a word boundary: secrets span words too (a quoted
    password with spaces, an XML ``<password>`` element, a cookie header), so no boundary is safe for all of
    them. ``capture.privacy`` is standard library only; it is imported here, on the first cut, never on an
    ordinary event's path: it loads ``typing`` and ``base64`` (~4 ms) and compiles its patterns on first use (~6
    ms), and redacting costs 0.5 to 0.7 µs a character, so one cut costs 2 to 6 ms (some 25 ms in text with no
    whitespace near the cut), paid only by events over the worker's size limit (which already encode megabytes).
    Past ``CUT_REDACT_BUDGET`` characters redacted for one event (a body of thousands of long strings), a string
    is sent as the marker alone, as it is should the redaction fail.

    The marker (``CUT_MARKER``) starts a line of its own and holds no ``=``, ``:``, ``@`` or quote: every rule
    reads a key's value on the key's line, so the worker, which redacts again, never takes the marker for the
    value of a key the kept text ends with (``password = ``, ``Bearer ``, ``--token ``), nor for an earlier
    redaction (it does not start like a placeholder); and as the end of the kept text is redacted already,
    nothing it ends with can escape the worker's rules by being glued to the marker.
    """
    import re

    begin = _window_start(text, cap)
    reach = cap + CUT_LOOKAHEAD
    space = re.compile(r"\s").search(text, reach, reach + CUT_TOKEN_REACH)
    end = min(len(text), space.start() if space is not None else reach + CUT_TOKEN_REACH)
    if not budget.take(cap - begin + end - begin):
        return CUT_MARKER.format(n=len(text))
    try:
        from memcairn.wire.privacy.redaction import redact_secrets

        near = redact_secrets(text[begin:cap])
        window = redact_secrets(text[begin:end])
    except Exception as exc:  # fail open, but never with half a secret: send the marker alone
        if budget.warn is not None:
            budget.warn(f"could not redact a text before cutting it ({type(exc).__name__}: {exc}); its content is "
                        "left out")
        return CUT_MARKER.format(n=len(text))
    kept = near if window.startswith(near) else near[:_common_prefix(near, window)]
    kept = _without_open_placeholder(kept)
    return text[:begin] + kept + CUT_MARKER.format(n=len(text) - cap + len(near) - len(kept))


def _shrink(value: Any, cap: int, budget: Budget | None = None) -> Any:
    """``value`` with every string longer than ``cap`` cut (``cut_redacted``); without a budget, a plain cut that only
    tells the size (no redaction: never sent)."""
    if isinstance(value, str):
        if len(value) <= cap:
            return value
        if budget is None:
            return value[:cap] + CUT_MARKER.format(n=len(value) - cap)
        return cut_redacted(value, cap, budget)
    if isinstance(value, dict):
        return {k: _shrink(v, cap, budget) for k, v in value.items()}
    if isinstance(value, list):
        return [_shrink(v, cap, budget) for v in value]
    return value


def fit_body(body: dict[str, Any], names: tuple[str, ...] = ("tool_response", "tool_input"),
             warn: Callable[[str], None] | None = None) -> bytes:
    """``body`` as JSON under the worker's size limit: the strings of ``names`` are cut shorter until it fits.

    Each cap is tried on plain cuts first (cheap), and the redacting cut runs only for the cap that fits, so
    no string is redacted for a cap that will not do; it cuts the values as given, so a marker is never cut
    again and its count stays right."""
    raw = encode_json(body)
    if len(raw) <= HOOK_BODY_BYTES:
        return raw
    given = {name: body[name] for name in names if name in body}
    budget = Budget(warn)
    for cap in STRING_CAPS:
        if cap != STRING_CAPS[-1]:
            sized = {**body, **{name: _shrink(value, cap) for name, value in given.items()}}
            if len(encode_json(sized)) > HOOK_BODY_BYTES:
                continue
        for name, value in given.items():
            body[name] = _shrink(value, cap, budget)
        raw = encode_json(body)
        if len(raw) <= HOOK_BODY_BYTES:
            break
    return raw
