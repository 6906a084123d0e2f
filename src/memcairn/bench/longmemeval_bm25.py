"""The anchor of ``memcairn bench longmemeval``: plain BM25 over turns, independent of memcairn's store and search.

Each turn of a haystack is one document of an in-memory SQLite FTS5 table (``porter unicode61``; FTS5's ``bm25()``
is Okapi BM25 with k1 = 1.2, b = 0.75); the question's words, stopwords left out, are OR-ed; a session is ranked
by its best turn. No floor, no fusion, no windows: what any retrieval of memcairn's must beat on the same data.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence

from memcairn.bench.longmemeval_data import Session
from memcairn.bench.longmemeval_scores import TOP_SESSIONS

METHOD = "bm25-turns"
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = frozenset("""a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had has have having he
her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now
of off on once only or other our ours ourselves out over own same she should so some such than that the their theirs
them themselves then there these they this those through to too under until up very was we were what when where
which while who whom why will with would you your yours yourself yourselves""".split())


class TurnIndex:
    """BM25 over the turns of some sessions; ``rank`` gives distinct session ids, best first."""

    def __init__(self, sessions: Sequence[Session]) -> None:
        self._conn = sqlite3.connect(":memory:")
        self._conn.execute("CREATE VIRTUAL TABLE turns USING fts5(sid UNINDEXED, body, tokenize='porter unicode61')")
        self._conn.executemany("INSERT INTO turns(sid, body) VALUES (?, ?)",
                               [(s.id, text) for s in sessions for _, text in s.turns if text.strip()])

    def rank(self, question: str, top: int = TOP_SESSIONS) -> list[str]:
        words = list(dict.fromkeys(w.lower() for w in _WORD.findall(question)))
        words = [w for w in words if w not in _STOP] or words
        if not words:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        out: dict[str, None] = {}
        for (sid,) in self._conn.execute("SELECT sid FROM turns WHERE turns MATCH ? ORDER BY bm25(turns)", (match,)):
            if sid not in out:
                out[sid] = None
                if len(out) >= top:
                    break
        return list(out)

    def close(self) -> None:
        self._conn.close()
