"""Freshness in the team server's SessionStart context, as the caller says it.

The server has no working directory, so it never judges how true a memory is. A connected worker does, against
the project's files on its machine, in two steps: ``GET /v1/context?anchors=true`` gives the digest and, in
``anchored``, the anchors of the memories it was built from; when the worker finds any of them changed or stale, it
asks again with ``states`` (``{"12": {"state": "stale", "reasons": ["billing.py deleted since"]}}``), and the digest
is rendered with those states as a local one is (a mark after a changed row's title, a stale one moved under "No
longer true"). A memory the caller says nothing of is shown as it is stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from memcairn.core.models import MemoryItem
from memcairn.search.freshness import CHANGED, STALE, Freshness
from memcairn.server.http import ApiError

TOLD_STATES = (CHANGED, STALE)
MAX_STATES = 200
MAX_REASONS = 3
REASON_CHARS = 200


class ToldFreshness:
    """A ``FreshnessCheck`` answering with the caller's states (by the API's ids) and keeping what it was asked."""

    def __init__(self, told: Mapping[int, Freshness]) -> None:
        self.told = dict(told)
        self.asked: list[MemoryItem] = []

    def check(self, items: Iterable[MemoryItem]) -> dict[int, Freshness]:
        self.asked = list(items)
        return {i.id: self.told[i.id] for i in self.asked if i.id in self.told}

    def anchored(self) -> list[dict[str, Any]]:
        """The memories asked about that rest on something: their ids, projects and anchors."""
        return [{"id": i.id, "project": i.project, "anchors": i.anchors} for i in self.asked if i.anchors]


def parse_states(raw: str | None) -> dict[int, Freshness]:
    """``states`` as a query parameter gives it (JSON: API id -> {state, reasons}); 400 when malformed."""
    if not raw:
        return {}
    try:
        given = json.loads(raw)
    except ValueError:
        raise ApiError(400, "invalid", "states must be a JSON object: {\"12\": {\"state\": \"stale\", \"reasons\": "
                                       "[\"a.py deleted since\"]}}") from None
    if not isinstance(given, dict) or len(given) > MAX_STATES:
        raise ApiError(400, "invalid", f"states must be a JSON object of at most {MAX_STATES} memories")
    out = {}
    for key, said in given.items():
        if not (key.isascii() and key.isdigit()) or not isinstance(said, dict) or said.get("state") not in TOLD_STATES:
            raise ApiError(400, "invalid", f"states[{key!r}] must be a memory id with {{\"state\": "
                                           f"{' or '.join(TOLD_STATES)}, \"reasons\": [...]}}")
        reasons = said.get("reasons") or []
        if not isinstance(reasons, list) or not all(isinstance(r, str) and "\x00" not in r for r in reasons):
            raise ApiError(400, "invalid", f"states[{key!r}].reasons must be a list of strings")
        out[int(key)] = Freshness(said["state"], tuple(r[:REASON_CHARS] for r in reasons[:MAX_REASONS]))
    return out
