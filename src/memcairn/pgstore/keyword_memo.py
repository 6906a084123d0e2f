"""A server process's copy of its projects' keyword postings, so a search ranks every match with BM25 in memory
instead of asking PostgreSQL to rank them.

Why: at 1,000 memories a project the keyword leg's ranking statement (match, ``ts_rank`` of every match, BM25
over the best 200) was most of a fused search's database time; the postings of a project searched a minute ago
are still in memory and answer the same question without a statement. PostgreSQL stays the truth: the copy is
read from the ``fts`` column it maintains (a row's lexemes and their weighted occurrences, exactly what the SQL
ranking reads) and every search first brings it up to date from the change sequence.

How it stays current: each change row names the transaction that wrote it (``changes.xid``, migration 7). A
copy remembers the oldest transaction still running when it last read (``pg_snapshot_xmin``, its ``horizon``):
every change it has not applied belongs to that transaction or a later one, so one indexed read of the changes
at or above the horizon finds them all, although sequence numbers are not handed out in commit order (a change
numbered 100 may commit after 101). A change read twice is applied once (``applied``). A stored memory's
postings are read by id; a forgotten one is masked. A backlog over ``MAX_APPLIED`` changes reads the project
again whole.

Memory: per posting a row number and a weighted count (8 bytes), per row its id, length, time and a live flag,
per term two small arrays; at most ``MAX_ROWS`` rows are kept, the projects searched longest ago dropped first.
A search over more than that ranks in SQL as before.
"""

from __future__ import annotations

import threading
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import psycopg

MAX_ROWS = 500_000
MAX_APPLIED = 5_000  # changes behind a copy past which the project is read again whole
TITLE_WEIGHT = 4  # a lexeme's occurrence in the title counts four times (its weight-A positions), as in SQL

# A row's lexemes and each one's weighted occurrences (its positions, the title's counted TITLE_WEIGHT times).
_POSTINGS = ("SELECT i.id, i.doc_tokens, i.created_at_epoch, x.lexemes, x.freqs FROM items i"
             " LEFT JOIN LATERAL (SELECT array_agg(u.lexeme) AS lexemes, array_agg(cardinality(u.weights)"
             f" + {TITLE_WEIGHT - 1} * cardinality(array_positions(u.weights, 'A'))) AS freqs FROM unnest(i.fts) AS u)"
             " AS x ON true WHERE i.tenant_id = %s")
_XMIN = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"


@dataclass
class ProjectPostings:
    """One project's rows and the postings of each lexeme they hold."""

    project_id: int
    horizon: int  # changes of transactions older than this one are in the copy
    ids: array = field(default_factory=lambda: array("q"))
    lengths: array = field(default_factory=lambda: array("l"))
    epochs: array = field(default_factory=lambda: array("q"))
    alive: bytearray = field(default_factory=bytearray)
    row_of: dict[int, int] = field(default_factory=dict)
    postings: dict[str, tuple[array, array]] = field(default_factory=dict)
    applied: dict[int, int] = field(default_factory=dict)  # seq -> xid of changes at or above the horizon
    rows: int = 0  # live rows
    words: int = 0  # their total length
    dead: int = 0

    def add(self, item_id: int, length: int, epoch: int, lexemes: Sequence[str], freqs: Sequence[int]) -> None:
        if item_id in self.row_of:  # read twice (by the load and a change): once is enough
            return
        row = len(self.ids)
        self.row_of[item_id] = row
        self.ids.append(item_id)
        self.lengths.append(length)
        self.epochs.append(epoch)
        self.alive.append(1)
        self.rows += 1
        self.words += length
        for lexeme, freq in zip(lexemes, freqs, strict=True):
            held = self.postings.get(lexeme)
            if held is None:
                held = self.postings[lexeme] = (array("l"), array("f"))
            held[0].append(row)
            held[1].append(freq)

    def drop(self, item_id: int) -> None:
        row = self.row_of.get(item_id)
        if row is None or not self.alive[row]:
            return
        self.alive[row] = 0
        self.rows -= 1
        self.words -= self.lengths[row]
        self.dead += 1

    def holding(self, lexeme: str) -> int:
        """Live rows holding the lexeme."""
        held = self.postings.get(lexeme)
        if held is None:
            return 0
        if not self.dead:
            return len(held[0])
        alive = self.alive
        return sum(alive[r] for r in held[0])

    def matches(self, lexeme: str) -> Iterator[tuple[int, float]]:
        """(row, weighted occurrences) of the live rows holding the lexeme."""
        held = self.postings.get(lexeme)
        if held is None:
            return iter(())
        if not self.dead:
            return zip(held[0], held[1], strict=True)
        alive = self.alive
        return ((r, f) for r, f in zip(held[0], held[1], strict=True) if alive[r])

    def epoch_of(self, item_id: int) -> int | None:
        row = self.row_of.get(item_id)
        return self.epochs[row] if row is not None and self.alive[row] else None


class KeywordMemo:
    """The copies of one process, per project, current to the snapshot of the last search that used them."""

    def __init__(self, max_rows: int = MAX_ROWS, max_applied: int = MAX_APPLIED) -> None:
        self.max_rows, self.max_applied = max_rows, max_applied
        self._lock = threading.Lock()
        self._copies: OrderedDict[int, ProjectPostings] = OrderedDict()  # least recently searched first
        self._held = 0  # rows in all copies
        # a request's cursor and the projects it brought up to date: a second use in the same request (the
        # candidates' evidence after the ranking) does not read the changes again
        self._polled: weakref.WeakKeyDictionary[psycopg.Cursor, frozenset[int]] = weakref.WeakKeyDictionary()

    def current(self, cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int]) -> list[ProjectPostings] | None:
        """The projects' copies, brought up to date in ``cur``'s transaction (read whole the first time); None when
        they would hold more than ``max_rows`` rows (the caller ranks in SQL)."""
        wanted = frozenset(int(p) for p in project_ids)
        with self._lock:
            if self._polled.get(cur) is not None and wanted <= self._polled[cur]:
                copies = [self._copies.get(p) for p in wanted]
                if all(c is not None for c in copies):
                    return copies  # type: ignore[return-value]
            held = [p for p in wanted if p in self._copies]
            if held:
                self._catch_up(cur, tenant_id, [self._copies[p] for p in held])
            for project_id in wanted - set(held):
                if self._load(cur, tenant_id, project_id) is None:
                    return None
            if any(p not in self._copies for p in wanted):  # one dropped to make room for another
                return None
            for project_id in wanted:
                self._copies.move_to_end(project_id)
            self._polled[cur] = wanted | self._polled.get(cur, frozenset())
            return [self._copies[p] for p in wanted]

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"projects": len(self._copies), "rows": self._held}

    # -- under the lock -------------------------------------------------------------------------------------
    def _load(self, cur: psycopg.Cursor, tenant_id: int, project_id: int) -> ProjectPostings | None:
        # the horizon is read before the rows: an older horizon only re-reads changes the copy already holds
        horizon = int(cur.execute(f"SELECT {_XMIN}").fetchone()[0])  # type: ignore[index]
        rows = cur.execute(_POSTINGS + " AND i.project_id = %s", (tenant_id, project_id)).fetchall()
        if len(rows) > self.max_rows:
            return None
        while self._copies and self._held + len(rows) > self.max_rows:
            _, dropped = self._copies.popitem(last=False)
            self._held -= len(dropped.ids)
        copy = ProjectPostings(project_id, horizon)
        for item_id, length, epoch, lexemes, freqs in rows:
            copy.add(int(item_id), int(length or 0), int(epoch), lexemes or (), freqs or ())
        self._copies[project_id] = copy
        self._held += len(copy.ids)
        return copy

    def _catch_up(self, cur: psycopg.Cursor, tenant_id: int, copies: list[ProjectPostings]) -> None:
        by_id = {c.project_id: c for c in copies}
        oldest = min(c.horizon for c in copies)
        rows = cur.execute(
            f"SELECT {_XMIN}, c.seq, c.project_id, c.item_id, c.op, c.xid::text::bigint FROM (SELECT 1) AS one"
            " LEFT JOIN changes c ON c.tenant_id = %s AND c.project_id = ANY(%s) AND c.xid >= %s::text::xid8"
            " ORDER BY c.seq", (tenant_id, list(by_id), str(oldest))).fetchall()
        horizon = int(rows[0][0])
        news = [r for r in rows if r[1] is not None and r[5] >= by_id[r[2]].horizon and r[1] not in by_id[r[2]].applied]
        if len(news) > self.max_applied:  # a large backlog (an import): read the projects again
            for copy in copies:
                self._held -= len(self._copies.pop(copy.project_id).ids)
                self._load(cur, tenant_id, copy.project_id)
            return
        stored = [int(r[3]) for r in news if r[4] == "stored" and int(r[3]) not in by_id[r[2]].row_of]
        if stored:
            for item_id, length, epoch, lexemes, freqs, project_id in cur.execute(
                    _POSTINGS.replace(" FROM items i", ", i.project_id FROM items i", 1) + " AND i.id = ANY(%s)",
                    (tenant_id, stored)).fetchall():
                copy = by_id.get(int(project_id))
                if copy is not None:
                    self._held += int(item_id) not in copy.row_of
                    copy.add(int(item_id), int(length or 0), int(epoch), lexemes or (), freqs or ())
        for _, seq, project_id, item_id, op, xid in news:
            if op == "forgotten":
                by_id[project_id].drop(int(item_id))
            by_id[project_id].applied[int(seq)] = int(xid)
        for copy in copies:
            copy.horizon = max(copy.horizon, horizon)
            copy.applied = {s: x for s, x in copy.applied.items() if x >= copy.horizon}
