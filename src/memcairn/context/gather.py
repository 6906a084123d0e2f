"""What the SessionStart digest shows, read from the store: the chain's totals, its recent observations
and its sessions' summaries, and how true the observations still are when a checker is given (a stale one
leaves the rows: ``ContextData.live``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from memcairn.context.lines import how_to_check, last_test_result
from memcairn.core.corrections import state_of
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.core.tokens import tokens_for_chars
from memcairn.search.freshness import STALE, Freshness, FreshnessCheck
from memcairn.store.protocols import ContextStore
from memcairn.wire.config import Settings

log = logging.getLogger("memcairn.context")

OBSERVATION_KINDS = ("observation", "manual")
SUMMARIES_PER_SESSION = 8  # summaries read per session shown (a session has one per turn)
# Which observations are most worth a row: decisions and fixes before features and changes, lookups last.
USEFULNESS = {"decision": 0, "bugfix": 1, "feature": 2, "note": 2, "change": 3, "refactor": 3, "discovery": 5}
FULL_MAX_OBSERVATIONS = 1000
FULL_MAX_SUMMARIES = 100
SCAN_WINDOW = 5000  # recent rows are looked for among the chain's newest items


@dataclass(frozen=True)
class ChainTotals:
    items: int
    chars: int

    @property
    def tokens(self) -> int:
        return tokens_for_chars(self.chars)


@dataclass(frozen=True)
class SessionDigest:
    """One session's summaries (newest first) and the decisions recorded in it, shown as one block."""

    summaries: tuple[MemoryItem, ...]
    decisions: tuple[MemoryItem, ...] = ()
    tests: str = ""  # the newest test result its observations report (``context_lines.last_test_result``)
    checks: str = ""  # the commands that checked the work and passed (``context_lines.how_to_check``)

    @property
    def latest(self) -> MemoryItem:
        return self.summaries[0]


def sessions_of(summaries: Sequence[MemoryItem], observations: Sequence[MemoryItem],
                limit: int | None = None) -> tuple[SessionDigest, ...]:
    """Summaries grouped by session, the session with the newest summary first; a summary without a session is
    a session of its own. ``limit`` sessions at most."""
    groups: dict[str, list[MemoryItem]] = {}
    for item in summaries:  # newest first
        groups.setdefault(item.session or f"#{item.id}", []).append(item)
    out = []
    for key, items in groups.items():
        own = [o for o in observations if o.session and o.session == key]
        out.append(SessionDigest(tuple(items), tuple(o for o in own if o.type == "decision"), last_test_result(own),
                                 how_to_check(own)))
    return tuple(out[:limit] if limit is not None else out)


def by_usefulness(observations: Sequence[MemoryItem]) -> tuple[MemoryItem, ...]:
    """Newest-first ``observations`` reordered: the most useful types first, the newest first within a type."""
    ranked = sorted(enumerate(observations), key=lambda pair: (USEFULNESS.get(pair[1].type, 4), pair[0]))
    return tuple(item for _, item in ranked)


@dataclass(frozen=True)
class ContextData:
    projects: tuple[str, ...] | None  # None = every project
    observations: tuple[MemoryItem, ...]  # newest first
    summaries: tuple[MemoryItem, ...]  # newest first
    totals: ChainTotals
    session_limit: int | None = None  # sessions shown at most (None: every one of ``summaries``)
    freshness: Mapping[int, Freshness] = field(default_factory=dict)  # by id; empty when not checked

    @cached_property
    def sessions(self) -> tuple[SessionDigest, ...]:
        """Worked out once: fitting the budget renders the body several times. A stale summary leaves its
        session's block as a stale observation leaves the rows (a session left with none leaves the digest)."""
        return sessions_of(tuple(s for s in self.summaries if not self._stale(s)), self.live, self.session_limit)

    @cached_property
    def live(self) -> tuple[MemoryItem, ...]:
        """The observations the code has not left behind (all of them unless some are stale)."""
        return tuple(o for o in self.observations if not self._stale(o))

    @cached_property
    def stale(self) -> tuple[MemoryItem, ...]:
        """Stale observations and summaries, newest first."""
        found = [i for i in (*self.observations, *self.summaries) if self._stale(i)]
        return tuple(sorted(found, key=lambda i: (i.created_at_epoch, i.id), reverse=True))

    def _stale(self, item: MemoryItem) -> bool:
        found = self.freshness.get(item.id)
        return found is not None and found.state == STALE


def _window_start(store: ContextStore, project_ids: Sequence[int] | None, items: int,
                  platform: str | None = None) -> int | None:
    """Epoch at or after which the chain's newest ``SCAN_WINDOW`` items (of ``platform`` when given) lie (None:
    the chain is smaller).

    "Recent" rows are looked for there only, so a chain without summaries (or without the chosen types)
    does not make every SessionStart walk all of its items.
    """
    if items <= SCAN_WINDOW:
        return None
    return store.window_start(project_ids, SCAN_WINDOW, platform)


def _types(settings: Settings) -> list[str] | None:
    chosen = [t.strip() for t in settings.context_types.split(",") if t.strip()]
    return chosen or None


def gather(store: ContextStore, settings: Settings, projects: Sequence[str] | None = None, *,
           full: bool = False, platform_source: str | None = None,
           freshness: FreshnessCheck | None = None) -> ContextData:
    """What the context shows, read from the store (the only part of rendering that touches it).
    ``platform_source`` keeps that agent's items and those of no agent (see the module docstring); ``freshness``
    checks the observations' files (the team server has none of them: it passes none)."""
    names = tuple(dict.fromkeys(projects)) if projects else None
    platform = platform_source.strip() if platform_source and platform_source.strip() else None
    n_obs = FULL_MAX_OBSERVATIONS if full else max(0, settings.context_observations)
    n_sum = FULL_MAX_SUMMARIES if full else max(0, settings.context_summaries)
    ids = store.resolve_project_ids(list(names)) if names is not None else None
    totals = ChainTotals(*store.chain_totals(ids, platform))
    observations: list[MemoryItem] = []
    summaries: list[MemoryItem] = []
    if totals.items:
        since = None if full else _window_start(store, ids, totals.items, platform)
        scope = ItemFilter(projects=names, date_start=since, platform_source=platform,
                           platform_source_or_none=True)
        if n_obs:
            observations = store.list_items(replace(scope, kinds=list(OBSERVATION_KINDS), types=_types(settings)),
                                            limit=n_obs)
        if n_sum:
            wanted = n_sum if full else n_sum * SUMMARIES_PER_SESSION
            summaries = store.list_items(replace(scope, kinds=["summary"]), limit=wanted)
    # a memory said not to hold (superseded, wrong, a reverted fix: core/corrections.py) is no part of the digest
    observations = [o for o in observations if state_of(o) is None]
    summaries = [s for s in summaries if state_of(s) is None]
    shown = [*observations, *summaries]
    states = _states(freshness, shown) if freshness is not None and shown else {}
    return ContextData(names, tuple(observations), tuple(summaries), totals, None if full else n_sum, states)


def _states(freshness: FreshnessCheck, items: Sequence[MemoryItem]) -> dict[int, Freshness]:
    """The observations' and summaries' freshness; none when the check fails (the digest never does for it)."""
    try:
        return freshness.check(items)
    except Exception:
        log.warning("freshness check failed; the digest shows every observation", exc_info=True)
        return {}
