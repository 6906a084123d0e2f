"""Store methods for the evidence behind the memories (``schema.EVIDENCE_TABLES``): keep a session's steps, find
the ones a query matches. Mixed into ``Store`` so the store stays the only owner of connections and SQL."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from memcairn.store import fts
from memcairn.store.db import atomic
from memcairn.store.records import EvidenceHit, NewEvidence

# bm25 ranks every matching step of the asked projects; past this many matches the newest are ranked (a word in
# every step of a long history would otherwise rank them all on each search).
EVIDENCE_RANK_CAP = 20_000


class EvidenceMixin:
    _conn: sqlite3.Connection

    def add_evidence(self, steps: Sequence[NewEvidence]) -> int:
        """Keep these steps; a step already kept (by its key: a replay, or a call whose result came later) takes
        the newer text and memory. A step of a project the store does not hold is skipped. Returns how many
        were written."""
        if not steps:
            return 0
        with atomic(self._conn) as conn:
            cursor = conn.executemany(
                "INSERT INTO evidence(project_id, item_id, step_key, text, created_at_epoch) "
                "SELECT p.id, (SELECT id FROM memory_items WHERE id = ?), ?, ?, ? FROM projects p WHERE p.name = ? "
                "ON CONFLICT(step_key) DO UPDATE SET text = excluded.text, "
                "item_id = COALESCE(excluded.item_id, evidence.item_id) WHERE evidence.text != excluded.text "
                "OR evidence.item_id IS NOT excluded.item_id",
                [(s.item_id, f"{s.platform_source}\x1f{s.session}\x1f{s.step}", s.text, int(s.created_at_epoch),
                  s.project) for s in steps])
        return max(cursor.rowcount, 0)

    def evidence_search(self, query: str, projects: Sequence[str] | None, limit: int) -> list[EvidenceHit]:
        """The ``limit`` stored steps that best match ``query`` (bm25, as the keyword leg builds its match), of
        ``projects`` only when given."""
        match = fts.build_match(query)
        if match is None or limit <= 0:
            return []
        where, args = "", []
        if projects:
            where = (" AND e.project_id IN (SELECT id FROM projects WHERE name IN "
                     f"({', '.join('?' * len(projects))}))")
            args = list(projects)
        try:
            rows = self._conn.execute(
                "SELECT e.id, i.id, e.text, e.created_at_epoch, r.score FROM ("
                "  SELECT rowid, bm25(evidence_fts) AS score FROM evidence_fts WHERE evidence_fts MATCH ?"
                "  ORDER BY rowid DESC LIMIT ?"
                f") r JOIN evidence e ON e.id = r.rowid LEFT JOIN memory_items i ON i.id = e.item_id WHERE 1{where} "
                "ORDER BY r.score LIMIT ?",
                (match, EVIDENCE_RANK_CAP, *args, int(limit))).fetchall()
        except sqlite3.OperationalError:  # a store opened before migration 16 ran elsewhere: no evidence yet
            return []
        return [EvidenceHit(int(i), None if item is None else int(item), text, int(at), -float(score))
                for i, item, text, at, score in rows]

    def evidence_count(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM evidence").fetchone()[0])
