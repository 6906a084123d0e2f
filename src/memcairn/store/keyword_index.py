"""The keyword index's postings held in memory, so a long-lived process ranks a query without FTS5's
per-row bm25.

Why: FTS5 runs ``bm25()`` once per matching row (about 1.1 us a row, with a B-tree read of the row's
length), and a query of common words matches thousands of rows: most of a keyword search's time at 100k
items. The same numbers as arrays rank those rows in numpy several times faster, with the same scores bit
for bit: ``rank`` evaluates FTS5's own formula (``store.bm25``) in its order of operations, summed over the
query's phrases in query order, with ``f`` the sum of the column weights over the phrase's instances in the
row and ``D`` the row's length in tokens (every column). A phrase of an ``AND`` group that does not match a
row adds nothing to it, as in FTS5. The test suite compares both on every plan shape.

What it holds: per term, the rows holding it and ``f`` in each; per row its length and project. It is read
from FTS5's own ``fts5vocab`` instance table, so a term is whatever FTS5's tokenizer made of the text.

How it stays current: every write to ``memory_items``, from any process, logs the item id in
``keyword_changes`` (triggers, ``schema.py``). A query first applies the entries past the copy's last one:
those rows are tokenised again by FTS5 (a temp FTS5 table with the same columns and tokenizer) and their
old postings are masked. A logged NULL (the FTS index was rebuilt), an entry older than the log keeps, or
a large backlog of changes builds the copy again in the background. Filters on kind, type, platform and
creation time are answered from per-row arrays kept beside the postings (a filtered search ranks every
match, as in SQL). Until a copy is ready, and for what it does not answer (concepts, files, a session,
time order, a query word FTS5 splits in two), the caller ranks in SQL as before. The whole-query phrase,
ranked in only when every word is rare, is scored by FTS5 itself (a phrase needs positions, which the copy
does not keep).

Memory: about 12 bytes a posting plus about 40 bytes a row in arrays (44 MB at 100k synthetic items), and the
terms; the worker's resident memory grew by 65-70 MB at 100k items.
"""

from __future__ import annotations

import array
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from memcairn.core.models import ItemFilter
from memcairn.store import bm25, fts
from memcairn.store.schema import FTS_COLUMNS, SCOPE_PREFIX

log = logging.getLogger(__name__)

# Rows re-indexed since the build, as postings, past which the copy is built again (the extra postings are
# concatenated on every query that uses their terms).
REBUILD_AFTER_EXTRA_POSTINGS = 200_000
# A backlog longer than this (an import in another process) is cheaper to build again than to apply.
MAX_APPLIED_CHANGES = 20_000
# Stores larger than this keep ranking in SQL: the copy's memory grows with the store.
MAX_ROWS = 500_000

_INDEXED = ("fts_scope", *FTS_COLUMNS)
_WEIGHT = dict(zip(("project_id", "kind", *_INDEXED), fts.BM25_WEIGHTS, strict=True))
_EMPTY_DOCS = np.zeros(0, np.int32)
_EMPTY_FREQS = np.zeros(0, np.float64)


@dataclass(frozen=True)
class _Postings:
    """The terms' postings in one block: term ``t``'s rows are ``docs[offsets[t]:offsets[t + 1]]``."""

    term_ids: dict[str, int]
    offsets: np.ndarray
    docs: np.ndarray
    freqs: np.ndarray

    def of(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        tid = self.term_ids.get(term)
        if tid is None:
            return _EMPTY_DOCS, _EMPTY_FREQS
        start, end = int(self.offsets[tid]), int(self.offsets[tid + 1])
        return self.docs[start:end], self.freqs[start:end]


@dataclass(frozen=True)
class _Attributes:
    """What a filter reads, per row id: kind, type and platform as codes of ``codes`` (-1: none), and the
    creation time."""

    codes: dict[str, int]
    kinds: np.ndarray
    types: np.ndarray
    platforms: np.ndarray
    created: np.ndarray

    @staticmethod
    def read(conn: sqlite3.Connection, ids: Sequence[int] | None, size: int,
             base: _Attributes | None = None) -> _Attributes:
        """The rows ``ids`` (every row when None) over ``base`` (copied, grown to ``size``)."""
        if base is None:
            codes: dict[str, int] = {}
            kinds, types, platforms = (np.full(size, -1, np.int32) for _ in range(3))
            created = np.zeros(size, np.int64)
        else:
            codes = dict(base.codes)
            kinds, types, platforms = (_grown(a, size, -1) for a in (base.kinds, base.types, base.platforms))
            created = _grown(base.created, size, 0)
        sql = "SELECT id, kind, type, platform_source, created_at_epoch FROM memory_items"
        if ids is None:
            batches: Iterable[Sequence[int] | None] = [None]
        else:
            batches = [ids[i:i + 500] for i in range(0, len(ids), 500)]
            for array_ in (kinds, types, platforms):
                array_[np.asarray(ids, np.int64)] = -1

        def code(value: object) -> int:
            if value is None:
                return -1
            return codes.setdefault(str(value), len(codes))

        for chunk in batches:
            cursor = conn.cursor()
            cursor.row_factory = None
            if chunk is None:
                cursor.execute(sql)
            else:
                cursor.execute(f"{sql} WHERE id IN ({', '.join('?' for _ in chunk)})", list(chunk))
            for item_id, kind, type_, platform, at in cursor:
                if item_id >= size:
                    continue
                kinds[item_id], types[item_id], platforms[item_id] = code(kind), code(type_), code(platform)
                created[item_id] = at
        return _Attributes(codes, kinds, types, platforms, created)

    def allowed(self, flt: ItemFilter) -> np.ndarray | None:
        """Rows the filter keeps (projects aside: the caller scopes them), or None when the filter asks
        for what is not held here (concepts, files, a session)."""
        if flt.concepts or flt.files or flt.session:
            return None
        keep = np.ones(len(self.kinds), bool)
        for values, column in ((flt.kinds, self.kinds), (flt.types, self.types)):
            if values:
                keep &= np.isin(column, [self.codes[v] for v in values if v in self.codes])
        if flt.date_start is not None:
            keep &= self.created >= flt.date_start
        if flt.date_end is not None:
            keep &= self.created <= flt.date_end
        if flt.platform_source:
            wanted = [self.codes.get(flt.platform_source, -2)] + ([-1] if flt.platform_source_or_none else [])
            keep &= np.isin(self.platforms, wanted)
        return keep


@dataclass(frozen=True)
class _State:
    """One consistent copy; a query reads one reference to it, a change makes a new one."""

    base: _Postings
    lengths: np.ndarray          # tokens per row id (0: no such row)
    projects: np.ndarray         # project id per row id (-1: none)
    rows: int
    tokens: int
    seq: int                     # the last keyword_changes entry applied
    attributes: _Attributes
    dead: np.ndarray | None = None                       # row ids whose ``base`` postings are stale
    extra: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # rows indexed since
    extra_postings: int = 0
    norms: np.ndarray = field(init=False, repr=False)  # per row id: bm25's length term (``bm25.length_norm``)

    def __post_init__(self) -> None:
        avgdl = self.tokens / self.rows if self.rows else 1.0
        object.__setattr__(self, "norms", bm25.length_norm(self.lengths, avgdl))

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        docs, freqs = self.base.of(term)
        if self.dead is not None and len(docs):
            keep = ~self.dead[docs]
            docs, freqs = docs[keep], freqs[keep]
        more = self.extra.get(term)
        if more is not None:
            docs, freqs = np.concatenate((docs, more[0])), np.concatenate((freqs, more[1]))
        return docs, freqs


class _Collector:
    """Instance rows (term, row id, column), in the vocabulary's order (term, then row), into postings,
    lengths and projects, for row ids below ``size``; fed in chunks."""

    def __init__(self, size: int) -> None:
        self.term_ids: dict[str, int] = {}
        self.starts = array.array("q")
        self.docs = array.array("i")
        self.freqs = array.array("d")
        self._lengths = array.array("i", bytes(4 * size))
        self._projects = array.array("i", [-1]) * size
        self._last: tuple[str, int] | None = None

    def add(self, rows: Iterable[tuple[str, int, str]]) -> None:
        term_ids, starts, docs, freqs = self.term_ids, self.starts, self.docs, self.freqs
        lengths, projects = self._lengths, self._projects
        last_term, last_doc = self._last if self._last is not None else (None, -1)
        for term, doc, col in rows:
            if term != last_term:
                term_ids[term] = len(term_ids)
                starts.append(len(docs))
                last_term, last_doc = term, -1
            if doc != last_doc:
                docs.append(doc)
                freqs.append(0.0)
                last_doc = doc
            freqs[-1] += _WEIGHT.get(col, 1.0)
            lengths[doc] += 1
            if col == "fts_scope" and term.startswith(SCOPE_PREFIX) and term[len(SCOPE_PREFIX):].isdigit():
                projects[doc] = int(term[len(SCOPE_PREFIX):])
        if last_term is not None:
            self._last = (last_term, last_doc)

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per row id (0: the row was not read)."""
        return np.frombuffer(self._lengths, np.int32) if len(self._lengths) else np.zeros(0, np.int32)

    @property
    def projects(self) -> np.ndarray:
        return np.frombuffer(self._projects, np.int32) if len(self._projects) else np.zeros(0, np.int32)

    def postings(self) -> _Postings:
        offsets = np.empty(len(self.starts) + 1, np.int64)
        offsets[:-1] = np.frombuffer(self.starts, np.int64) if len(self.starts) else []
        offsets[-1] = len(self.docs)
        return _Postings(self.term_ids, offsets,
                         np.frombuffer(self.docs, np.int32) if len(self.docs) else _EMPTY_DOCS,
                         np.frombuffer(self.freqs, np.float64) if len(self.freqs) else _EMPTY_FREQS)

    def by_term(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        p = self.postings()
        return {term: p.of(term) for term in p.term_ids}


def _grown(values: np.ndarray, size: int, fill: float | int) -> np.ndarray:
    if size <= len(values):
        return values.copy()
    out = np.full(max(size, len(values) * 2), fill, values.dtype)
    out[:len(values)] = values
    return out


class KeywordIndex:
    """The in-memory copy for one store; safe to share between threads (each passes its own connection)."""

    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        self.max_rows = max_rows
        self._state: _State | None = None
        self._lock = threading.Lock()
        self._building = False
        self._built = threading.Event()
        self._terms: dict[str, list[str]] = {}
        self.status = "building"
        self.built_at: float | None = None
        self.build_seconds: float | None = None

    # -- building ---------------------------------------------------------------------------------
    def build(self, conn: sqlite3.Connection) -> bool:
        """Read the whole index (seconds at 100k rows); False when the store is over ``max_rows``."""
        started = time.perf_counter()
        conn.execute("BEGIN")  # the log position and the postings from one snapshot
        try:
            rows = conn.execute("SELECT COUNT(*) FROM memory_items_fts_docsize").fetchone()[0]
            if rows > self.max_rows:
                self.status = f"off: {rows} rows, more than {self.max_rows}"
                self._state = None
                return False
            seq = _head(conn)
            top = conn.execute("SELECT MAX(id) FROM memory_items_fts_docsize").fetchone()[0] or 0
            attributes = _Attributes.read(conn, None, top + 1)
            _ensure_vocab(conn)
            collector = _Collector(top + 1)
            cursor = conn.cursor()
            cursor.row_factory = None
            cursor.execute("SELECT term, doc, col FROM temp.keyword_index_instances")
            while chunk := cursor.fetchmany(50_000):
                collector.add(chunk)
        finally:
            conn.execute("COMMIT")
        lengths = collector.lengths.astype(np.float64)
        state = _State(collector.postings(), lengths, collector.projects.copy(), int(np.count_nonzero(lengths)),
                       int(lengths.sum()), seq, attributes)
        with self._lock:
            self._state = state
        self.status = "ready"
        self.built_at = time.time()
        self.build_seconds = round(time.perf_counter() - started, 2)
        return True

    def build_in_background(self, connect: Callable[[], sqlite3.Connection]) -> None:
        """Build on a thread of its own over a connection of its own, unless a build is running."""
        with self._lock:
            if self._building:
                return
            self._building = True
            self._built.clear()

        def run() -> None:
            try:
                conn = connect()
                try:
                    self.build(conn)
                finally:
                    conn.close()
            except Exception as exc:  # the SQL path answers meanwhile; the next change tries again
                self.status = f"failed: {exc}"
                log.warning("keyword index build failed: %s", exc)
            finally:
                with self._lock:
                    self._building = False
                self._built.set()

        threading.Thread(target=run, name="memcairn-keyword-index", daemon=True).start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a background build to end; True when a copy is ready to answer."""
        self._built.wait(timeout)
        return self._state is not None

    def stats(self) -> dict[str, object]:
        state = self._state
        out: dict[str, object] = {"status": self.status, "build_seconds": self.build_seconds}
        if state is not None:
            out.update(rows=state.rows, terms=len(state.base.term_ids),
                       postings=len(state.base.docs) + state.extra_postings,
                       bytes=int(state.base.docs.nbytes + state.base.freqs.nbytes + state.base.offsets.nbytes
                                 + state.lengths.nbytes + state.projects.nbytes))
        return out

    # -- keeping current --------------------------------------------------------------------------
    def current(self, conn: sqlite3.Connection, rebuild: Callable[[], None]) -> _State | None:
        """The copy with every logged change applied, or None (not built, or being built again; ``rebuild``
        is then called to start that)."""
        state = self._state
        if state is None:
            return None
        head = _head(conn)
        if head == state.seq:
            return state
        with self._lock:
            state = self._state
            if state is None:
                return None
            if head == state.seq:
                return state
            changes = conn.execute(
                "SELECT seq, item_id FROM keyword_changes WHERE seq > ? ORDER BY seq LIMIT ?",
                (state.seq, MAX_APPLIED_CHANGES + 1)).fetchall()
            oldest = conn.execute("SELECT MIN(seq) FROM keyword_changes").fetchone()[0]
            lost = head < state.seq or (oldest is not None and oldest > state.seq + 1)
            if (lost or len(changes) > MAX_APPLIED_CHANGES
                    or any(item_id is None for _, item_id in changes)):
                self._state = None
                self.status = "rebuilding"
                stale = True
            else:
                stale = False
                ids = sorted({int(item_id) for _, item_id in changes})
                state = self._apply(conn, state, ids, changes[-1][0] if changes else head)
                self._state = state
        if stale:
            rebuild()
            return None
        if state.extra_postings > REBUILD_AFTER_EXTRA_POSTINGS:
            rebuild()  # this copy keeps answering until the new one is ready
        return state

    def _apply(self, conn: sqlite3.Connection, state: _State, ids: list[int], seq: int) -> _State:
        top = max(ids) + 1
        collector = _Collector(top)
        _ensure_reindex(conn)
        try:
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                marks = ", ".join("?" for _ in chunk)
                conn.execute(f"INSERT INTO temp.keyword_reindex(rowid, {', '.join(_INDEXED)}) "
                             f"SELECT id, {', '.join(_INDEXED)} FROM memory_items_fts_source WHERE id IN ({marks})",
                             chunk)
            cursor = conn.cursor()
            cursor.row_factory = None
            collector.add(cursor.execute("SELECT term, doc, col FROM temp.keyword_reindex_instances"))
        finally:
            conn.execute("DELETE FROM temp.keyword_reindex")
        lengths = _grown(state.lengths, top, 0.0)
        projects = _grown(state.projects, top, -1)
        dead = _grown(state.dead if state.dead is not None else np.zeros(len(state.lengths), bool), top, False)
        changed = np.array(ids, np.int64)
        new_lengths = collector.lengths[changed]
        rows = state.rows - int(np.count_nonzero(lengths[changed])) + int(np.count_nonzero(new_lengths))
        tokens = state.tokens - int(lengths[changed].sum()) + int(new_lengths.sum())
        lengths[changed] = new_lengths
        projects[changed] = collector.projects[changed]
        dead[changed] = True
        extra: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for term, (docs, freqs) in state.extra.items():  # drop the re-indexed rows' earlier extra postings
            keep = ~np.isin(docs, changed)
            if keep.any():
                extra[term] = (docs[keep], freqs[keep])
        for term, (docs, freqs) in collector.by_term().items():
            if term in extra:
                extra[term] = (np.concatenate((extra[term][0], docs)), np.concatenate((extra[term][1], freqs)))
            else:
                extra[term] = (docs.copy(), freqs.copy())
        extra_postings = sum(len(d) for d, _ in extra.values())
        attributes = _Attributes.read(conn, ids, len(lengths), state.attributes)
        return replace(state, lengths=lengths, projects=projects, rows=rows, tokens=tokens, seq=seq, dead=dead,
                       attributes=attributes,
                       extra=extra, extra_postings=extra_postings)

    # -- ranking ----------------------------------------------------------------------------------
    def terms(self, conn: sqlite3.Connection, tokens: Sequence[str]) -> list[list[str]]:
        """FTS5's terms for each token, remembered (a token's terms never change)."""
        known = {t: self._terms.get(t) for t in tokens}
        missing = [t for t, terms in known.items() if terms is None]
        if missing:
            found = dict(zip(missing, fts.token_terms(conn, missing), strict=True))
            if len(self._terms) > 50_000:
                self._terms = {}
            self._terms.update(found)
            known.update(found)
        return [known[t] or [] for t in tokens]

    @staticmethod
    def frequencies(state: _State, terms: Sequence[Sequence[str]]) -> list[int]:
        """Rows holding each token's term (0 for a token without one), as ``fts.plan_terms`` wants."""
        return [len(state.postings(t[0])[0]) if len(t) == 1 else 0 for t in terms]

    def rank(self, conn: sqlite3.Connection, state: _State, plan: fts.MatchPlan, terms: dict[str, str],
             project_ids: Sequence[int] | None, cap: int | None, limit: int, offset: int,
             allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """(row id, score) best first, as ``Store.keyword_ids`` ranks ``plan`` in SQL: bm25 over the matching
        rows of ``project_ids`` (every project when None) that ``allowed`` keeps (all when None), the newest
        ``cap`` of them when a cap is given, ties broken by the higher id. ``terms`` maps each of the plan's
        words to its one FTS5 term."""
        if state.rows == 0:
            return []
        size = len(state.lengths)
        score = np.zeros(size, np.float64)
        matched = np.zeros(size, bool)

        def add(term: str, where: np.ndarray | None = None) -> np.ndarray:
            docs, freqs = state.postings(term)
            hits = len(docs)
            part = bm25.idf(state.rows, hits) * bm25.saturation(freqs, state.norms[docs])
            if where is not None:
                part = part * where[docs]
            score[docs] += part
            return docs

        for word in plan.any_of:
            matched[add(terms[word])] = True
        if plan.all_of:
            count = np.zeros(size, np.int16)
            for word in plan.all_of:
                count[state.postings(terms[word])[0]] += 1
            together = count == len(plan.all_of)
            for word in plan.all_of:
                add(terms[word], together)
            matched |= together
        if plan.phrase is not None:
            found = conn.execute(
                f"SELECT rowid, {fts.bm25_expression()} FROM memory_items_fts WHERE memory_items_fts MATCH ?",
                (fts.MatchPlan((plan.phrase,)).match,)).fetchall()
            if found:
                ids = np.array([r[0] for r in found], np.int64)
                ids_ok = ids < size
                score[ids[ids_ok]] += -np.array([r[1] for r in found], np.float64)[ids_ok]
        if project_ids is not None:
            matched &= np.isin(state.projects, np.asarray(list(project_ids), np.int32))
        if allowed is not None:
            matched &= allowed
        ids = np.flatnonzero(matched)
        if cap is not None and len(ids) > cap:
            ids = ids[-cap:]
        scores = score[ids]
        order = np.lexsort((-ids, -scores))[offset:offset + limit]
        return [(int(ids[i]), float(scores[i])) for i in order]


def _head(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT seq FROM keyword_changes ORDER BY seq DESC LIMIT 1").fetchone()
    return int(row[0]) if row is not None else 0


def _ensure_vocab(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.keyword_index_instances "
                 "USING fts5vocab(main, memory_items_fts, 'instance')")


def _ensure_reindex(conn: sqlite3.Connection) -> None:
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.keyword_reindex USING fts5({', '.join(_INDEXED)}, "
                 "tokenize='porter unicode61')")
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.keyword_reindex_instances "
                 "USING fts5vocab(temp, keyword_reindex, 'instance')")
