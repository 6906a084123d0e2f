"""The SessionStart context (path A): what an agent reads about a project before the first prompt.

``render_context`` is what ``GET /api/context/inject`` answers. It is a pure function of the store's data,
the settings, ``now`` and ``tz``, so the whole text is golden-tested. Plain text (for the model) looks like::

    <memcairn-memory trust="data">
    Recalled memory from earlier sessions, shown as data: ...
    # memcairn memory · project demo · 2026-12-01 14:30 UTC
    Legend: sessions newest first, unfinished work and decisions first; observation rows are ...
    ## Recent sessions (2, newest first)
    ### 2026-11-30 17:45 · Fix the parser timeout (#120)
    Next steps: ... / Decisions: ... / Tests: ... / Learned: ... / Done: ...
    ### 2026-11-28 16:02 · Fix the flaky import test (#98)
    ...
    ## Recent observations (3)
    ### 2026-11-30
    #101 09:12 bugfix Fixed the race in the cache writer
    Cost: ~812 tokens here; ~123,456 tokens of past work behind them (340 memories).
    More: search(query) ... timeline ... get_observations ... important_workflow ...
    </memcairn-memory>

- **Fenced once**: the whole text sits in the data fence of ``memcairn.wire.fence``; recalled text is made
  one printable line (no control characters, no forged fence markers) before it is placed.
- **Sessions lead**: the summaries (one per turn, plus those an agent wrote when compacting) are grouped by
  session, the session with the newest first; a block is titled by the session's first request and says what
  is unfinished (the newest next steps), the decisions recorded in it, its last test result, what it learned and
  what it did, without repeating the titles of the rows shown below it (``memcairn.context.lines``).
- **Freshness** (``search.freshness``, checked against the files now by ``context.freshness_check``): a row whose
  files changed since has ``[changed since]`` after its title; a stale one leaves the rows (and the session
  blocks' decisions), a session block's newest summary changed since marks its heading and a stale summary
  leaves its block (a session with none left leaves the digest), and up to ``NO_LONGER_TRUE`` of the stale
  observations and summaries are named under a "No longer true" heading. The
  text then depends on those files too (the memo keys on ``FreshnessChecker.token``); memories without anchors
  are shown as before.
- **Rows**: a row (not a lookup's) whose title was cut short shows up to ``HEADLINE_CHARS`` of the text it was
  cut from (the reason of a decision; the cause and the fix; what changed in a file).
- **Limits**: ``context_summaries`` sessions (up to ``SUMMARIES_PER_SESSION`` summaries read for each) and
  ``context_observations`` observations (kinds observation and manual, of ``context_types`` when set), the most
  useful kept (decisions and fixes before features and changes, lookups last; ``USEFULNESS``), shown by day;
  looked for among the chain's newest ``SCAN_WINDOW`` items (so a chain without summaries is not walked to its
  first item).
- **Hard budget**: the text never exceeds ``context_token_budget`` tokens (chars / 4). Over it, the least useful
  observation rows go down to ``KEPT_OBSERVATIONS``, the sessions' lines get shorter, the oldest sessions go,
  the other rows go, the last session's lines get shorter and go, then the legend (``_fit``); if even that does
  not fit, one fenced line says how much memory there is, and below ~70 tokens nothing is returned (an empty
  context rather than a broken fence). Capture notices, above the fence, take at most half of the budget (the
  rest are counted in one line).
- ``full`` lifts the count limits (up to ``FULL_MAX_*``) and the budget: for people and debugging.
- ``colors`` gives the same rows (chosen under the same budget) with ANSI colours and without the fence,
  for a person's terminal; nothing coloured ever goes to the model.
- **Footer**: the tokens this context costs, the tokens of past work behind it (stored characters / 4 of
  every item of the project chain) and the MCP tools that reach the rest.
- **The frame grows with the memory**: the legend, and the footer as two lines naming every tool, come only when
  the memory shown (sessions and rows) is ``FRAME_SHARE`` times their size; a smaller digest gets one footer line
  (cost, then search -> timeline -> get_observations) and no legend.
- An empty project chain gives one line: memory starts after the first session.

``platform_source`` (``platformSource`` on the route and the MCP tool) narrows the context to one agent's
memories: the rows, the window they are looked for in and the past-work figure count only items recorded on
that platform, plus the items recorded by no agent at all (``platform_source`` NULL: notes saved by hand
through ``/api/memory/save`` or ``save_memory`` without a platform), which belong to every agent. Without it,
the memories of every agent in the chain are shown.

The past-work figure is counted once per project chain and worker (one scan of the chain's rows: ~0.3 s
for 100k items in one project) and then kept up to date incrementally (new ids are added; a count that does
not match, i.e. a delete, triggers a recount), so a warm worker answers in milliseconds. Edits of old items
are noticed at the next recount.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from typing import Any

from memcairn.context.clock import HEADER, clock_text, local_moment
from memcairn.context.freshness_check import checker_for
from memcairn.context.gather import ContextData, SessionDigest, by_usefulness, gather
from memcairn.context.lines import LISTED_MIN, not_done_since, unlisted, without_runs
from memcairn.context.notices import notice_lines
from memcairn.core.clock import now_ms as current_ms
from memcairn.core.models import MemoryItem
from memcairn.core.tokens import tokens_for_chars
from memcairn.search.freshness import FreshnessCheck, mark, with_mark
from memcairn.search.render import display_title
from memcairn.store.protocols import ContextStore
from memcairn.wire.config import Settings
from memcairn.wire.fence import clean_line, fence

TITLE_CHARS = 90
TYPE_CHARS = 16
SCOPE_CHARS = 80
SCOPE_NAMES = 4  # project names a header lists at most (then "and N more"): a chain of many long names must
# not fill the budget, nor push the rows out (the header is in every fitting attempt)
# Characters per line of a session, shortened step by step. The first is long: a session's own summary (the
# agent's words: what it built, why, what broke) holds more of what a later session needs than more rows do.
SECTION_CAPS = (1500, 600, 300, 150, 80, 0)
# A session's lines, unfinished work and decisions first (see ``_session_lines``).
SESSION_LINES = ("Next steps", "Decisions", "Tests", "Checks", "Learned", "Done")
NO_LONGER_TRUE = 3  # stale observations named under the rows at most (they leave the rows themselves)
KEPT_OBSERVATIONS = 10  # the most useful rows, kept until the sessions' lines are shorter and only one is left
# A title cut short loses what the row is for (the reason of a decision, the cause and the fix of a bug, what
# changed in a file): the row shows up to HEADLINE_CHARS of the text the title was cut from (``_row_title``), and
# the budget then keeps fewer, whole rows. Lookups keep their titles (the least useful rows).
HEADLINE_TYPES = ("decision", "bugfix", "feature", "change", "refactor")
HEADLINE_CHARS = 220
HEADLINE_STEM = 20  # characters a cut title must keep to be recognised as the start of its text
COMPACTED = "Compacted: "  # the title prefix of a summary an agent wrote when compacting (capture.pipeline)
MIN_BUDGET_TOKENS = 1
LEGEND = ("Legend: sessions newest first, unfinished work and decisions first; observation rows are #id HH:MM "
          "type title, by day, oldest first; types: bugfix, feature, refactor, change, discovery, decision, note "
          "(saved by hand). Pass an #id to timeline or get_observations.")
MORE = ("More: search(query) lists matching ids (~20-30 tokens a hit) -> timeline(anchor=id) shows what "
        "happened around one -> get_observations(ids) reads full records; important_workflow explains the order.")
# The frame grows with what it frames: the legend, the cost line and the long pointer to the tools are shown when
# the memory they frame (session blocks and rows) is at least FRAME_SHARE times their size; a digest of a few lines
# gets one line of cost and pointer instead (on a small store the frame otherwise cost three times the memory).
FRAME_SHARE = 3
COST_CHARS = 80  # about a cost line's length (fixed: whether it is shown must not depend on its own count)
SHORT_MORE = "more: search(query) -> timeline(anchor=id) -> get_observations(ids)."
# Every setting the text depends on (``memcairn.context.memo`` keys memoized texts on them): add any new one.
CONTEXT_SETTINGS = ("context_observations", "context_summaries", "context_token_budget", "context_types")
EMPTY = "memcairn: no memories yet for {scope}; memory starts after the first session."

# ANSI (the coloured variant only)
RESET = "\x1b[0m"
BOLD, DIM, CYAN, YELLOW = "1", "2", "36", "33"
TYPE_COLOURS = {"bugfix": "31", "feature": "32", "refactor": "35", "change": "33", "discovery": "34",
                "decision": "36", "note": "37"}


# -- rendering --------------------------------------------------------------------------------------
class _Style:
    def __init__(self, ansi: bool) -> None:
        self.ansi = ansi

    def paint(self, text: str, *codes: str) -> str:
        codes = tuple(c for c in codes if c)
        if not self.ansi or not codes or not text:
            return text
        return f"\x1b[{';'.join(codes)}m{text}{RESET}"


@dataclass
class _Shape:
    """How much of the data is shown; shrunk step by step until the text fits the budget (``_fit``)."""

    observations: int
    sessions: int
    cap: int = 0  # index into SECTION_CAPS
    legend: bool = True


def _most(shape: _Shape, name: str, low: int, high: int, fits: Callable[[], bool]) -> None:
    """Set ``name`` (observation rows or sessions) to the most in ``low..high`` that fit, ``low`` fitting: the
    text grows with each, so bisection finds it in a few renders instead of one per row."""
    while low < high:
        middle = (low + high + 1) // 2
        setattr(shape, name, middle)
        low, high = (middle, high) if fits() else (low, middle - 1)
    setattr(shape, name, low)


def _fit(shape: _Shape, fits: Callable[[], bool]) -> bool:
    """Shrink ``shape`` until ``fits``; False if nothing fits. In this order: the least useful observation rows
    go down to ``KEPT_OBSERVATIONS``, the sessions' lines get shorter once, the oldest sessions go (one stays),
    the other observation rows go, the last session's lines get shorter and go, then the legend. Whatever step
    made it fit, as many sessions and then observation rows as then fit are shown."""
    rows, sessions = shape.observations, shape.sessions
    if fits():
        return True
    shape.observations = min(rows, KEPT_OBSERVATIONS)
    steps: list[Callable[[], None]] = [lambda: None, lambda: setattr(shape, "cap", 1),
                                       lambda: setattr(shape, "sessions", min(sessions, 1)),
                                       lambda: setattr(shape, "observations", 0)]
    steps += [lambda: setattr(shape, "cap", shape.cap + 1)] * (len(SECTION_CAPS) - 2)
    steps += [lambda: setattr(shape, "legend", False)]
    for step in steps:
        step()
        if fits():
            _most(shape, "sessions", shape.sessions, sessions, fits)
            _most(shape, "observations", shape.observations, rows, fits)
            return True
    return False


def _scope(projects: tuple[str, ...] | None) -> str:
    if not projects:
        return "all projects"
    head = f"project {clean_line(projects[0], SCOPE_CHARS)}"
    if len(projects) > 1:
        listed = [clean_line(p, SCOPE_CHARS) for p in projects[1:SCOPE_NAMES]]
        more = len(projects) - SCOPE_NAMES
        if more > 0:
            listed.append(f"and {more:,} more")
        head += f" (with {', '.join(listed)})"
    return head


def _title(item: MemoryItem) -> str:
    return clean_line(display_title(item, limit=TITLE_CHARS * 4), TITLE_CHARS) or "(untitled)"


def _row_title(item: MemoryItem) -> str:
    """An observation row's title; when the title is its narrative cut short, whole or after a name and ``: ``
    (``path: what changed…``), up to ``HEADLINE_CHARS`` of that narrative instead (``Auto-generated migration uses
    ALTER TABLE MODIFY (unsupported in SQLite for…`` goes on to say why, and what was done instead)."""
    title = _title(item)
    if item.type not in HEADLINE_TYPES or not title.endswith("…"):
        return title
    stem = title[:-1].rstrip()
    whole = clean_line(item.narrative)
    head, _, rest = stem.partition(": ")
    if rest and whole.startswith(rest) and len(whole) > len(rest) and len(rest) >= HEADLINE_STEM:
        return clean_line(f"{head}: {whole}", HEADLINE_CHARS)
    if len(stem) < HEADLINE_STEM or len(whole) <= len(stem) or not whole.startswith(stem):
        return title
    return clean_line(whole, HEADLINE_CHARS)


def _kind(item: MemoryItem) -> str:
    return clean_line(item.type, TYPE_CHARS) or item.kind


class _Rows:
    """Each item's cleaned title and type and each time in ``tz``, worked out once per render: fitting the
    budget renders the body several times, and cleaning text is most of a render's cost."""

    def __init__(self, tz: tzinfo | None) -> None:
        self.tz = tz
        self._titles: dict[int, str] = {}
        self._stored: dict[int, str] = {}
        self._kinds: dict[int, str] = {}
        self._times: dict[int, datetime] = {}

    def title(self, item: MemoryItem) -> str:
        found = self._titles.get(item.id)
        if found is None:
            found = self._titles[item.id] = _row_title(item)
        return found

    def stored_title(self, item: MemoryItem) -> str:
        """The title as stored (cleaned, uncut): how a summary's lists quote it."""
        found = self._stored.get(item.id)
        if found is None:
            found = self._stored[item.id] = clean_line(item.title)
        return found

    def kind(self, item: MemoryItem) -> str:
        found = self._kinds.get(item.id)
        if found is None:
            found = self._kinds[item.id] = _kind(item)
        return found

    def when(self, epoch_ms: int) -> datetime:
        found = self._times.get(epoch_ms)
        if found is None:
            found = self._times[epoch_ms] = local_moment(epoch_ms, self.tz)
        return found


def _tokens(chars: int) -> int:
    return tokens_for_chars(chars)


def shaping_settings(settings: Settings) -> tuple[Any, ...]:
    """The settings the text depends on (``CONTEXT_SETTINGS``): part of the key of a memoized text."""
    return tuple(getattr(settings, name) for name in CONTEXT_SETTINGS)


def _body(data: ContextData, shape: _Shape, style: _Style, now: datetime, rows: _Rows,
          here_tokens: int) -> list[str]:
    p = style.paint
    lines: list[str] = []
    carried = 0  # characters of memory shown (sessions' titles and lines, rows), uncoloured
    sessions = data.sessions[:shape.sessions]
    useful = by_usefulness(data.live)[:shape.observations]
    shown = sorted(useful, key=lambda item: (item.created_at_epoch, item.id))
    listed = frozenset(t for t in (rows.stored_title(item) for item in shown) if len(t) >= LISTED_MIN)
    if sessions:
        lines += ["", p(f"## Recent sessions ({len(sessions)}, newest first)", BOLD)]
        for session in sessions:
            latest = session.latest
            when = rows.when(latest.created_at_epoch)
            title = with_mark(f"### {when:%Y-%m-%d %H:%M} · {_session_title(session)} (#{latest.id})",
                              data.freshness.get(latest.id))
            lines.append(p(title, BOLD, CYAN))
            carried += len(title) + 1
            cap = SECTION_CAPS[shape.cap]
            for label, text in _session_lines(session, listed):
                text = clean_line(text, cap) if cap else ""
                if text:
                    lines.append(f"{p(label + ':', YELLOW)} {text}")
                    carried += len(label) + len(text) + 3
    if shown:
        lines += ["", p(f"## Recent observations ({len(shown)})", BOLD)]
        day = None
        for item in shown:
            at = rows.when(item.created_at_epoch)
            if f"{at:%Y-%m-%d}" != day:
                day = f"{at:%Y-%m-%d}"
                lines.append(p(f"### {day}", BOLD, CYAN))
            kind = rows.kind(item)
            title = with_mark(rows.title(item), data.freshness.get(item.id))
            row = f"{at:%H:%M} {kind} {title}"
            lines.append(f"{p(f'#{item.id}', DIM)} {at:%H:%M} {p(kind, TYPE_COLOURS.get(kind, ''))} {title}")
            carried += len(f"#{item.id} ") + len(row) + 1
    if data.stale and (shape.observations or not data.live):
        gone = data.stale[:NO_LONGER_TRUE]
        lines += ["", p(f"## No longer true ({len(gone)}, the code moved on)", BOLD)]
        for item in gone:
            row = f"#{item.id} {rows.title(item)} {mark(data.freshness.get(item.id))}"
            lines.append(p(row, DIM))
            carried += len(row) + 1
    totals = data.totals
    cost = (f"Cost: ~{here_tokens:,} tokens here; ~{totals.tokens:,} tokens of past work behind them "
            f"({totals.items:,} {'memory' if totals.items == 1 else 'memories'}).")
    framed = carried >= FRAME_SHARE * (len(LEGEND) + COST_CHARS + len(MORE))
    head = [p(f"{HEADER}{_scope(data.projects)} · {clock_text(now)}", BOLD)]
    if shape.legend and framed:
        head.append(p(LEGEND, DIM))
    foot = ["", p(cost, DIM), p(MORE, DIM)] if framed else ["", p(f"{cost[:-1]}; {SHORT_MORE}", DIM)]
    return head + lines + foot


def _session_title(session: SessionDigest) -> str:
    """What the session was about: the request of its first summary read (compaction summaries name the whole
    conversation, so they serve only when nothing else does)."""
    own = [s for s in session.summaries if not (s.title or "").startswith(COMPACTED)]
    item = own[-1] if own else session.latest
    title = display_title(item, limit=TITLE_CHARS * 4) or ""
    title = title[len(COMPACTED):] if title.startswith(COMPACTED) else title
    return clean_line(title, TITLE_CHARS) or "(untitled)"


def _joined(values: Sequence[str | None]) -> str:
    seen: dict[str, None] = {}
    for value in values:
        if value and value.strip():
            seen.setdefault(value.strip(), None)
    return " / ".join(seen)


def _next_steps(summaries: Sequence[MemoryItem]) -> str:
    """The work a session left open, from its summaries newest first: the newest turn's list, else the pending
    tasks of its latest compaction, said to be as of then when turns came after it (they may have done them:
    a task whose name a later turn's "done" names is left out, ``context_lines.not_done_since``); nothing from before a
    compaction (it summed those turns up, and their lists are older than its own)."""
    later: list[str] = []
    for summary in summaries:
        listed = summary.next_steps.strip() if summary.next_steps and summary.next_steps.strip() else ""
        if (summary.title or "").startswith(COMPACTED):
            left = not_done_since(listed, " ".join(later)) if later else listed
            if left and later:
                return f"(as of a compaction, {len(later)} turn{'s' if len(later) > 1 else ''} ago) {left}"
            return left
        if listed:
            return listed
        later.append(summary.completed or "")
    return ""


def _session_lines(session: SessionDigest, listed: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """(label, text) of a session block, unfinished work and decisions first: the next steps its newest summary
    gives, the decisions recorded in it, its last test result, then what it learned and did (newest first),
    without what the observation rows ``listed`` (their titles) show already."""
    summaries = session.summaries
    next_steps = _next_steps(summaries)
    decisions = _joined([display_title(d, limit=TITLE_CHARS * 2) for d in session.decisions])
    learned = _joined([unlisted(without_runs(s.learned), listed) for s in summaries])
    completed = _joined([unlisted(s.completed, listed) for s in summaries])
    return list(zip(SESSION_LINES, (next_steps, decisions, session.tests, session.checks, learned, completed),
                    strict=True))


def _minimal(data: ContextData) -> str:
    totals = data.totals
    return (f"memcairn memory · {_scope(data.projects)}: {totals.items:,} memories (~{totals.tokens:,} tokens); "
            "search(query) recalls them.")


@dataclass(frozen=True)
class Rendered:
    """A context's text and the memories it shows: observation rows and session blocks (none in the line that
    only counts them, or in an empty text)."""

    text: str
    shown: int


def render(data: ContextData, settings: Settings, *, now_ms: int, tz: tzinfo | None = None, colors: bool = False,
           full: bool = False, notices: Sequence[str] = ()) -> str:
    """The context text for ``data`` (see the module docstring); deterministic for a given ``now_ms``/``tz``."""
    return render_shown(data, settings, now_ms=now_ms, tz=tz, colors=colors, full=full, notices=notices).text


def render_shown(data: ContextData, settings: Settings, *, now_ms: int, tz: tzinfo | None = None,
                 colors: bool = False, full: bool = False, notices: Sequence[str] = ()) -> Rendered:
    """``render``, and how many memories the text shows."""
    total = max(MIN_BUDGET_TOKENS, settings.context_token_budget)
    head = notice_lines(notices, None if full else total * 4 // 2)
    if not head:
        return _render(data, settings, now_ms=now_ms, tz=tz, colors=colors, full=full)
    budget = total - _tokens(len(head)) - 1
    body = _render(data, replace(settings, context_token_budget=max(1, budget)), now_ms=now_ms, tz=tz,
                   colors=colors, full=full)
    return replace(body, text=head + body.text)


def _render(data: ContextData, settings: Settings, *, now_ms: int, tz: tzinfo | None, colors: bool,
            full: bool) -> Rendered:
    now = local_moment(now_ms, tz)
    limit = None if full else max(1, settings.context_token_budget) * 4
    if not data.totals.items:
        empty = EMPTY.format(scope=_scope(data.projects)) + "\n"
        return Rendered("" if limit is not None and len(empty) > limit and not colors else empty, 0)
    shape = _Shape(len(data.live), len(data.sessions))
    plain = _Style(False)
    rows = _Rows(tz)

    def plain_text(here: int) -> str:
        return fence("\n".join(_body(data, shape, plain, now, rows, here))) + "\n"

    # Fit with the widest count the footer can show, then settle the count on the final text.
    worst = _tokens(limit) if limit is not None else 10 ** 9
    if limit is not None and not _fit(shape, lambda: len(plain_text(worst)) <= limit):
        small = fence(_minimal(data)) + "\n"
        return Rendered(("" if len(small) > limit else small) if not colors else (_minimal(data) + "\n"), 0)
    here = worst
    for _ in range(4):
        settled = _tokens(len(plain_text(here)))
        if settled == here:
            break
        here = settled
    shown = min(shape.observations, len(data.live)) + min(shape.sessions, len(data.sessions))
    if colors:
        return Rendered("\n".join(_body(data, shape, _Style(True), now, rows, here)) + "\n", shown)
    return Rendered(plain_text(here), shown)


def render_context(store: ContextStore, settings: Settings, *, projects: Sequence[str] | None = None,
                   platform_source: str | None = None, colors: bool = False, full: bool = False,
                   now_ms: int | None = None, tz: tzinfo | None = None, notices: Sequence[str] = (),
                   freshness: FreshnessCheck | None = None) -> str:
    """The SessionStart context of the project chain ``projects`` (every project when None).

    ``platform_source`` narrows it to that agent's memories (and those recorded by no agent); None shows the
    memories of every agent. ``now_ms`` defaults to the current time and ``tz`` to local time. ``freshness``
    (the process's checker by default) checks the observations against their files now.
    """
    data = gather(store, settings, projects, full=full, platform_source=platform_source,
                  freshness=freshness or checker_for(store))
    return render(data, settings, now_ms=current_ms() if now_ms is None else now_ms, tz=tz,
                  colors=colors, full=full, notices=notices)
