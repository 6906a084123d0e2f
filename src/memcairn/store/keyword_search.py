"""The keyword leg: FTS5 ranking with filters, or the worker's in-memory copy of the index, checked against the
rows when it answers less than asked. Mixed into ``Store`` so the store stays the only owner of connections and SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memcairn.core.errors import KeywordIndexDamagedError, StoreError
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.store import fts
from memcairn.store.db import connect
from memcairn.store.records import SessionWindow

if TYPE_CHECKING:  # numpy is imported only by a process that keeps the copy (the worker)
    from memcairn.store.keyword_index import KeywordIndex

ORDERS = ("relevance", "newest", "oldest")
# The characters of a row's searchable text, as session_windows reports them.
_TEXT_CHARS = ("length(coalesce(title, '')) + length(coalesce(text, '')) + length(coalesce(narrative, '')) + "
               "length(facts) + length(coalesce(request, '')) + length(coalesce(learned, '')) + "
               "length(coalesce(completed, '')) + length(coalesce(next_steps, ''))")


class KeywordSearchMixin:
    _conn: sqlite3.Connection
    _target: str
    path: Path | None
    _frequencies: fts.FrequencyCache
    _keyword_index: KeywordIndex | None
    get_items: Callable[[Sequence[int]], list[MemoryItem]]
    resolve_project_ids: Callable[[Sequence[str]], list[int]]
    _where: Callable[[ItemFilter | None], tuple[list[str], list[Any]]]
    _fts_rows: Callable[[], int]
    keyword_probe: Callable[..., str | None]
    note_error: Callable[[BaseException], str | None]
    note_keyword_disagreement: Callable[[str], None]

    def keyword_search(self, query: str, flt: ItemFilter | None = None, *, limit: int = 20, offset: int = 0,
                       order: str = "relevance") -> list[tuple[MemoryItem, float]]:
        """BM25 over the FTS index with filters; scores are higher-is-better. Never raises on text."""
        hits = self.keyword_ids(query, flt, limit=limit, offset=offset, order=order)
        items = {i.id: i for i in self.get_items([item_id for item_id, _ in hits])}
        return [(items[item_id], score) for item_id, score in hits if item_id in items]

    def keyword_ids(self, query: str, flt: ItemFilter | None = None, *, limit: int = 20, offset: int = 0,
                    order: str = "relevance") -> list[tuple[int, float]]:
        """`keyword_search` without reading the rows: (item id, score) best first.

        A page the search did not fill (fewer hits than ``limit``) is checked by ``keyword_probe`` against the
        rows' text: a damaged index may answer nothing rather than fail.

        Raises:
            KeywordIndexDamagedError: the index cannot be read (a damaged block, a dropped table) or disagrees
                with the rows; the damage listeners heard of it (the worker rebuilds the index, as `memcairn
                doctor --fix` does).
        """
        try:
            hits, copy = self._keyword_ids(query, flt, limit=limit, offset=offset, order=order)
            found = self.keyword_probe(fts.query_tokens(query), copy) if len(hits) < limit else None
        except sqlite3.DatabaseError as exc:
            if self.note_error(exc) is None:
                raise
            raise KeywordIndexDamagedError(
                f"the keyword index cannot be read ({exc}); `memcairn doctor --fix` rebuilds it from the stored "
                "rows (a running worker does so by itself)") from None
        if found is not None:
            self.note_keyword_disagreement(found)
            raise KeywordIndexDamagedError(
                f"the keyword index is damaged ({found}); `memcairn doctor --fix` rebuilds it from the stored rows "
                "(a running worker does so by itself)")
        return hits

    def query_terms(self, query: str, ids: Sequence[int]) -> fts.QueryTerms | None:
        """The words ``query`` searches for, how many indexed rows hold each, and which of ``ids`` do; None when
        the keyword index cannot be read (the caller then has no keyword evidence)."""
        tokens = fts.query_tokens(query)
        try:
            frequencies = fts._document_frequencies(self._conn, tokens, self._frequencies) if tokens else []
            holding = fts.rows_holding(self._conn, tokens, ids)
            total = self._fts_rows()
        except sqlite3.DatabaseError as exc:
            self.note_error(exc)
            return None
        return fts.QueryTerms(tuple(tokens), tuple(frequencies), total, holding)

    def session_windows(self, ids: Sequence[int], radius: int = 1) -> dict[int, SessionWindow]:
        """For each of ``ids`` that exists: its session's row id (None without one), its window (the ids of
        itself and of up to ``radius`` items either side of it in the same session and project, in time order)
        and the characters of its text. A search ranks such windows as documents (``search.windows``); they are
        read from the rows, never stored."""
        if not ids:
            return {}
        wanted = [int(i) for i in dict.fromkeys(ids)]
        own: dict[int, tuple[int, int | None]] = {}
        chars: dict[int, int] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            for i, p, s, n in self._conn.execute(
                    f"SELECT id, project_id, session_id, {_TEXT_CHARS} FROM memory_items NOT INDEXED WHERE id IN "
                    f"({', '.join('?' for _ in chunk)})", chunk):
                own[i] = (p, s)
                chars[i] = n
        sessions = sorted({s for _, s in own.values() if s is not None})
        members: dict[tuple[int, int], list[int]] = {}
        for start in range(0, len(sessions), 500):
            chunk = sessions[start:start + 500]
            for i, p, s in self._conn.execute(
                    f"SELECT id, project_id, session_id FROM memory_items WHERE session_id IN "
                    f"({', '.join('?' for _ in chunk)}) ORDER BY session_id, created_at_epoch, id", chunk):
                members.setdefault((p, s), []).append(i)
        out: dict[int, SessionWindow] = {}
        for key, order in members.items():
            at = {i: n for n, i in enumerate(order)}
            for i in order:
                if i in own:
                    n = at[i]
                    out[i] = SessionWindow(key[1], tuple(order[max(0, n - radius):n + radius + 1]), chars[i])
        for i, (_, session) in own.items():
            out.setdefault(i, SessionWindow(session, (i,), chars[i]))
        return out

    def _keyword_ids(self, query: str, flt: ItemFilter | None, *, limit: int, offset: int,
                     order: str) -> tuple[list[tuple[int, float]], Any]:
        """The hits, and what answered: the in-memory copy's (state, terms by word), or None for FTS5."""
        project_ids = None
        if flt is not None and flt.projects is not None:  # narrowed inside the index (schema.SCOPE_PREFIX)
            project_ids = self.resolve_project_ids(list(flt.projects))
            if not project_ids:
                return [], None
            flt = replace(flt, projects=None)
        clauses, params = self._where(flt)
        if order == "relevance" and self._keyword_index is not None:
            answer = self._rank_in_memory(self._keyword_index, query, project_ids, flt if clauses else None,
                                          limit, offset)
            if answer is not None:
                return answer
        # A filtered search joins every ranked row to its item, so it ranks fewer rows for the same time.
        budget = fts.RANK_BUDGET // 2 if clauses else fts.RANK_BUDGET
        match = fts.plan_match(self._conn, query, self._fts_rows(), budget, self._frequencies)
        if match is None:
            return [], None
        if project_ids is not None:
            match = fts.scope_match(match, project_ids)
        score = fts.bm25_expression()
        order_sql = {
            "relevance": "score ASC, id DESC",
            "newest": "m.created_at_epoch DESC, m.id DESC",
            "oldest": "m.created_at_epoch ASC, m.id ASC",
        }.get(order, "score ASC, id DESC")
        # Without filters or a time order, rank the index alone: joining every match costs more than bm25.
        needs_join = bool(clauses) or order in ("newest", "oldest")
        if needs_join:
            sql = (
                f"SELECT memory_items_fts.rowid AS id, {score} AS score FROM memory_items_fts "
                "JOIN memory_items m ON m.id = memory_items_fts.rowid "
                "JOIN projects p ON p.id = m.project_id LEFT JOIN sessions s ON s.id = m.session_id "
                "WHERE memory_items_fts MATCH ?" + "".join(f" AND {c}" for c in clauses)
                + f" ORDER BY {order_sql} LIMIT ? OFFSET ?"
            )
            args: tuple[Any, ...] = (match, *params, int(limit), int(offset))
        else:
            # bm25 runs on the newest RANK_CAP matches at most (fts module doc); the LIMIT keeps SQLite from
            # flattening the inner query, so bm25 stays beside its MATCH.
            sql = (
                f"SELECT id, score FROM (SELECT memory_items_fts.rowid AS id, {score} AS score FROM memory_items_fts "
                "WHERE memory_items_fts MATCH ? ORDER BY memory_items_fts.rowid DESC LIMIT ?) "
                f"ORDER BY {order_sql} LIMIT ? OFFSET ?"
            )
            args = (match, fts.RANK_CAP, int(limit), int(offset))
        try:
            rows = self._conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:  # quoting makes this unreachable; never leak it anyway
            if self.note_error(exc) is not None:  # the table is gone: the caller says so
                raise
            raise StoreError(f"keyword search failed: {exc}") from None
        return [(r["id"], -float(r["score"])) for r in rows], None

    def _rank_in_memory(self, index: KeywordIndex, query: str, project_ids: list[int] | None,
                        flt: ItemFilter | None, limit: int, offset: int
                        ) -> tuple[list[tuple[int, float]], Any] | None:
        """``keyword_ids`` ranked by relevance from the worker's in-memory copy of the index (the same
        results, ``keyword_index`` module doc), with the copy's (state, terms by word); None when the copy
        cannot answer. ``flt`` holds the filters besides projects, None when there are none."""
        conn = self._conn
        state = index.current(conn, self._rebuild_keyword_index)
        if state is None:
            return None
        allowed = state.attributes.allowed(flt) if flt is not None else None
        if flt is not None and allowed is None:
            return None
        tokens = fts.query_tokens(query)
        if not tokens:
            return [], None
        terms = index.terms(conn, tokens)
        if any(len(t) != 1 for t in terms):  # FTS5 reads such a word as a phrase of several terms
            return None
        # As in SQL: a filtered search ranks every match (no cap) for half the frequency budget.
        budget, cap = (fts.RANK_BUDGET // 2, None) if flt is not None else (fts.RANK_BUDGET, fts.RANK_CAP)
        plan = fts.plan_terms(query, state.rows, lambda words: index.frequencies(state, index.terms(conn, words)),
                              budget)
        if plan is None:
            return [], None
        by_word = {tok: t[0] for tok, t in zip(tokens, terms, strict=True)}
        return index.rank(conn, state, plan, by_word, project_ids, cap, limit, offset, allowed), (state, by_word)

    def start_keyword_index(self, max_rows: int | None = None) -> KeywordIndex | None:
        """Keep an in-memory copy of the keyword index for faster ranking (a long-lived process: it costs a
        few seconds to build at 100k items, and memory); built in the background, used once ready."""
        if self.path is None:  # an in-memory database is not shared with a second connection
            return None
        if self._keyword_index is None:
            from memcairn.store import keyword_index

            self._keyword_index = keyword_index.KeywordIndex(max_rows or keyword_index.MAX_ROWS)
            self._rebuild_keyword_index()
        return self._keyword_index

    def _rebuild_keyword_index(self) -> None:
        if self._keyword_index is not None:
            self._keyword_index.build_in_background(lambda: connect(self._target))

    def keyword_index_stats(self) -> dict[str, object] | None:
        return self._keyword_index.stats() if self._keyword_index is not None else None

