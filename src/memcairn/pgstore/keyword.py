"""The team store's keyword leg: the local store's query plan, matched by PostgreSQL full-text search, the top
candidates re-scored with BM25 from per-project statistics.

1. Words: ``store.fts.query_tokens`` (split at every character that is not a letter or digit, stopwords out,
   32 at most), as the local store reads a query; the ``fts`` column splits text the same way (migration 5).
2. Statistics of the searched projects: rows, mean words per row (``doc_tokens``), and per word the rows
   holding its lexeme, counted through the GIN index in one statement and kept ``STATS_TTL`` seconds (a
   minute-old count ranks as well as a fresh one; matching never depends on it).
3. The plan for common words of ``store.fts.plan_terms``: beyond ``RANK_BUDGET`` matching rows the rarest
   words stay alternatives and the common ones are required together, ``rare1 | rare2 | (common1 & common2)``,
   plus the whole query as a phrase (``a <-> b``) when nothing was pruned.
4. Matching rows (searched projects of fewer than ``SCAN_BELOW`` rows are matched row by row: a GIN posting
   list holds every project's and tenant's rows), the newest ``KEYWORD_CAP`` of them, are ranked with
   ``ts_rank(fts, q, 1)`` (weighted tsvector, log length normalisation) and the best ``RESCORE_TOP`` are
   re-scored with FTS5's BM25 formula (``store.bm25``, shared with the local keyword index), summed over the
   plan's words, with ``f`` the word's occurrences weighted like the local bm25 columns (title 4, text 1) and
   ``D`` the row's words; words of the ``&`` group count only in rows holding all of them, and the phrase adds
   its idf at one occurrence. ``ts_rank`` alone ranks otherwise than BM25: it has no idf, so a row
   repeating a common word outranks one holding the rare word the query is about.

A ``KeywordLeg`` given ``copies`` (``pgstore/project_copies.py``, a server's) ranks every match from the projects'
postings in memory with the same plan and formula, and answers ``candidates`` from them too; the phrase alone is
matched in SQL, on the rows holding all its words. Without copies, or over their limits, it ranks in SQL as above.

Differences to the local store that remain: PostgreSQL's snowball stemmer and stopword list are not FTS5's
porter and list; ``D`` counts stopwords as FTS5 does, but a lexeme keeps at most 256 positions; the phrase's
occurrences are not counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from memcairn.pgstore.project_copies import ProjectCopies, ProjectCopy
from memcairn.pgstore.waits import before_waiting
from memcairn.store import bm25, fts

KEYWORD_CAP = 10_000  # matching rows ranked at most, the newest (as the local RANK_CAP)
# of those, the best by ts_rank re-scored with BM25 (1,000 ranked LongMemEval the same and was 25% slower at 100k)
RESCORE_TOP = 200
# projects with fewer rows are matched row by row, larger ones through the GIN index: a word's posting list grows
# with the whole database, a project's scan with the project alone (at 10k rows over 100 projects the two cost
# the same; at 100k the index is 15% faster for projects of 1,000)
SCAN_BELOW = 200
STATS_TTL = 60.0
# postings of a query's words in the searched copies above which they are scored in numpy (measured on 100 and
# 1,000 memories a project: row by row 0.16 vs 0.28 ms at ~200 postings, numpy 0.57 vs 0.68 ms at ~2,000)
NUMPY_ABOVE = 600
TITLE_WEIGHT = 4.0  # the local bm25 weight of the title column; text weighs 1
_STATS_KEEP = 20_000  # cached entries before the cache starts over


@dataclass(frozen=True)
class Stats:
    """What BM25 needs of the searched projects: rows, mean words a row, rows holding each word's lexeme."""

    rows: int
    mean_words: float
    holding: dict[str, int]


class TtlCache:
    """Values kept ``ttl`` seconds, by key (one per store; thread-safe)."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._values: dict[tuple[object, ...], tuple[float, object]] = {}

    def get(self, key: tuple[object, ...]) -> object | None:
        with self._lock:
            hit = self._values.get(key)
        return hit[1] if hit is not None and time.monotonic() - hit[0] < self.ttl else None

    def put(self, key: tuple[object, ...], value: object) -> None:
        with self._lock:
            if len(self._values) >= _STATS_KEEP:
                self._values.clear()
            self._values[key] = (time.monotonic(), value)


def in_projects(project_ids: Sequence[int]) -> tuple[str, object]:
    """``project_id`` matched against the projects, and its parameter: ``=`` for one project, so the
    ``(project_id, fts)`` GIN index reads that project's entries alone (GIN cannot search an ``= ANY`` array)
    and a btree index on ``(tenant_id, project_id, ...)`` is read in its order."""
    if len(project_ids) == 1:
        return "project_id = ", project_ids[0]
    return "project_id = ANY", list(project_ids)


def _quoted(word: str) -> str:
    """A word for ``to_tsquery`` (``query_tokens`` are letters and digits only: nothing to escape)."""
    return f"'{word}'"


def plan_tsquery(plan: fts.MatchPlan) -> str:
    """The plan as ``to_tsquery`` text: ``'a' | 'b' | ('c' & 'd') | 'a' <-> 'b'``."""
    parts = [_quoted(w) for w in plan.any_of]
    if plan.all_of:
        parts.append("(" + " & ".join(_quoted(w) for w in plan.all_of) + ")")
    if plan.phrase is not None:
        parts.append("(" + " <-> ".join(_quoted(w) for w in plan.phrase.split()) + ")")
    return " | ".join(parts)


class KeywordLeg:
    """Ranks a query's keyword matches in a tenant's projects (one per ``TeamStore``)."""

    def __init__(self, *, cap: int = KEYWORD_CAP, rescore: int = RESCORE_TOP, budget: int = fts.RANK_BUDGET,
                 ttl: float = STATS_TTL, scan_below: int = SCAN_BELOW, copies: ProjectCopies | None = None,
                 numpy_above: int = NUMPY_ABOVE) -> None:
        self.cap, self.rescore, self.budget, self.scan_below = cap, rescore, budget, scan_below
        self.numpy_above = numpy_above
        self.copies = copies  # the projects' postings in memory: every match ranked by BM25 without a statement
        self._cache = TtlCache(ttl)
        self._lexemes: dict[str, str] = {}  # word -> its lexeme ('' for a stopword)

    def words(self, cur: psycopg.Cursor, query: str) -> tuple[list[str], dict[str, str]]:
        """The query's words that have a lexeme (PostgreSQL's stopwords have none: they match nothing), and
        each one's lexeme (remembered: a word's lexeme never changes)."""
        words = fts.query_tokens(query)
        missing = [w for w in words if w not in self._lexemes]
        if missing:
            found = dict(cur.execute(
                "SELECT w, coalesce((SELECT min(lexeme) FROM unnest(to_tsvector('english', w))), '')"
                " FROM unnest(%s::text[]) AS w", (missing,)).fetchall())
            if len(self._lexemes) > _STATS_KEEP:
                self._lexemes = {}
            self._lexemes.update(found)
        lexemes = {w: self._lexemes[w] for w in words if self._lexemes.get(w)}
        return [w for w in words if w in lexemes], lexemes

    def query_terms(self, cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int], query: str,
                    ids: Sequence[int]) -> fts.QueryTerms:
        """What ``search.relevance`` judges keyword evidence by: the words, the rows holding each in the projects
        and which of ``ids`` hold each (as ``Store.query_terms`` gives it locally)."""
        return self.candidates(cur, tenant_id, project_ids, query, ids)[1]

    def candidates(self, cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int], query: str,
                   ids: Sequence[int]) -> tuple[dict[int, int], fts.QueryTerms]:
        """What fusion's order and the relevance floor need of a search's candidates ``ids``, in one statement
        (none when the projects' postings are in memory): each one's creation time (an id gone, or outside the
        projects, is left out) and ``query_terms``."""
        words, lexemes = self.words(cur, query)
        wanted = sorted({lexemes[w] for w in words})
        copies = self.copies.current(cur, tenant_id, project_ids) if self.copies is not None and project_ids else None
        if copies is not None:
            created, by_lexeme = _evidence(copies, ids, wanted)
            missing = [i for i in ids if i not in created]  # stored after the copies were brought up to date
            if missing:
                more, also = self._evidence_sql(cur, tenant_id, project_ids, missing, wanted)
                created.update(more)
                for lexeme, held in also.items():
                    by_lexeme[lexeme] |= held
            stats = _copies_stats(copies, words, lexemes)
        else:
            created, by_lexeme = self._evidence_sql(cur, tenant_id, project_ids, ids, wanted)
            stats = self.stats(cur, tenant_id, project_ids, words) if words and project_ids else Stats(0, 0.0, {})
        if not words or not project_ids:
            return created, fts.QueryTerms(tuple(words), tuple(0 for _ in words), 0, {w: set() for w in words})
        return created, fts.QueryTerms(tuple(words), tuple(stats.holding.get(w, 0) for w in words), stats.rows,
                                       {w: by_lexeme[lexemes[w]] for w in words})

    @staticmethod
    def _evidence_sql(cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int], ids: Sequence[int],
                      wanted: list[str]) -> tuple[dict[int, int], dict[str, set[int]]]:
        created: dict[int, int] = {}
        by_lexeme: dict[str, set[int]] = {lexeme: set() for lexeme in wanted}
        if ids and project_ids:
            # a lexeme matched against each row (``@@``, a search in its sorted tsvector): twice as fast as
            # unnesting every row's tsvector
            for item_id, epoch, held in cur.execute(
                    "SELECT id, created_at_epoch, array(SELECT w.n FROM unnest(%s::tsquery[]) WITH ORDINALITY AS"
                    " w(q, n) WHERE fts @@ w.q) FROM items WHERE tenant_id = %s AND id = ANY(%s)"
                    " AND project_id = ANY(%s)",
                    ([_quoted(x) for x in wanted], tenant_id, list(ids), list(project_ids))).fetchall():
                created[int(item_id)] = int(epoch)
                for n in held:
                    by_lexeme[wanted[int(n) - 1]].add(int(item_id))
        return created, by_lexeme

    def stats(self, cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int], words: Sequence[str]) -> Stats:
        scope = (tenant_id, tuple(sorted(project_ids)))
        size = self._cache.get(("size", *scope))
        if size is None:
            project_sql, project_param = in_projects(project_ids)
            row = cur.execute("SELECT count(*), coalesce(avg(doc_tokens), 0) FROM items WHERE tenant_id = %s"
                              f" AND {project_sql}(%s)", (tenant_id, project_param)).fetchone()
            size = (int(row[0]), float(row[1])) if row else (0, 0.0)
            self._cache.put(("size", *scope), size)
        rows, mean = size  # type: ignore[misc]
        holding: dict[str, int] = {}
        missing = []
        for word in words:
            known = self._cache.get(("word", *scope, word))
            if known is None:
                missing.append(word)
            else:
                holding[word] = int(known)  # type: ignore[call-overload]
        if missing:
            # one pass over the rows holding any of the words (GIN), a count per word
            counts = ", ".join(f"count(*) FILTER (WHERE fts @@ to_tsquery('english', %(w{n})s))"
                               for n in range(len(missing)))
            params: dict[str, object] = {f"w{n}": _quoted(w) for n, w in enumerate(missing)}
            project_sql, project_param = in_projects(project_ids)
            params.update(t=tenant_id, p=project_param, any=" | ".join(_quoted(w) for w in missing))
            row = cur.execute(f"SELECT {counts} FROM items WHERE tenant_id = %(t)s AND {project_sql}(%(p)s)"
                              " AND fts @@ to_tsquery('english', %(any)s)", params).fetchone()
            for word, count in zip(missing, row or [0] * len(missing), strict=True):
                holding[word] = int(count)
                self._cache.put(("word", *scope, word), int(count))
        return Stats(max(rows, *holding.values(), 0), mean, holding)  # counts of different ages: never fewer rows

    def rank(self, cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int], query: str,
             limit: int) -> list[tuple[int, float]]:
        """(item id, BM25 score) of the best ``limit`` matches, best first (ties: the newer id)."""
        words, lexemes = self.words(cur, query)
        if not words or not project_ids:
            return []
        copies = self.copies.current(cur, tenant_id, project_ids) if self.copies is not None else None
        if copies is not None:
            return self._rank_copies(cur, tenant_id, copies, words, lexemes, limit)
        before_waiting("ranking in SQL")
        stats = self.stats(cur, tenant_id, project_ids, words)
        plan = fts.plan_terms(" ".join(words), stats.rows, lambda ws: [stats.holding.get(w, 0) for w in ws],
                              self.budget)
        if plan is None:
            return []
        phrase = ("(" + " <-> ".join(_quoted(w) for w in plan.phrase.split()) + ")") if plan.phrase else None
        phrase_rows = self._phrase_rows(cur, tenant_id, project_ids, phrase) if phrase else 0
        wanted = [lexemes[w] for w in (*plan.any_of, *plan.all_of)]
        project_sql, project_param = in_projects(project_ids)
        # a word's GIN posting list spans every project and tenant: a small project's rows are read through its
        # btree and matched one by one (an expression the GIN index cannot answer) instead
        matches = "coalesce(i.fts @@ q.q, false)" if stats.rows < self.scan_below else "i.fts @@ q.q"
        # the phrase is parsed once (in q), and a word's weighted occurrences are counted with array functions
        # (its positions, plus the title's extra weight for each in the title)
        rows = cur.execute(
            "WITH q AS (SELECT to_tsquery('english', %(match)s) AS q, CASE WHEN %(phrase)s::text IS NULL THEN NULL"
            "  ELSE to_tsquery('english', %(phrase)s::text) END AS ph),"
            " m AS (SELECT i.id, i.fts, i.doc_tokens FROM items i, q WHERE i.tenant_id = %(t)s"
            f"  AND i.{project_sql}(%(p)s) AND {matches} ORDER BY i.id DESC LIMIT %(cap)s),"
            " top AS (SELECT m.id, m.fts, m.doc_tokens FROM m, q ORDER BY ts_rank(m.fts, q.q, 1) DESC, m.id DESC"
            "  LIMIT %(rescore)s)"
            " SELECT top.id, top.doc_tokens, coalesce(top.fts @@ q.ph, false), x.lexemes, x.freqs"
            " FROM top CROSS JOIN q LEFT JOIN LATERAL (SELECT array_agg(u.lexeme) AS lexemes,"
            "   array_agg(cardinality(u.weights) + (%(title)s - 1) * cardinality(array_positions(u.weights, 'A')))"
            "   AS freqs FROM unnest(top.fts) AS u WHERE u.lexeme = ANY(%(lex)s)) AS x ON true",
            {"match": plan_tsquery(plan), "t": tenant_id, "p": project_param, "cap": self.cap,
             "rescore": self.rescore, "phrase": phrase, "lex": wanted, "title": TITLE_WEIGHT}).fetchall()
        mean = stats.mean_words or 1.0
        weight = {w: bm25.idf(stats.rows, stats.holding.get(w, 0)) for w in (*plan.any_of, *plan.all_of)}
        phrase_idf = bm25.idf(stats.rows, phrase_rows)
        scored = [(int(item_id), _bm25_row(plan, lexemes, weight, mean,
                                           dict(zip(found or (), (float(x) for x in freqs or ()), strict=True)),
                                           length or 0, phrase_idf if in_phrase else None))
                  for item_id, length, in_phrase, found, freqs in rows]
        scored.sort(key=lambda hit: (-hit[1], -hit[0]))
        return scored[:limit]

    def _rank_copies(self, cur: psycopg.Cursor, tenant_id: int, copies: list[ProjectCopy], words: list[str],
                     lexemes: dict[str, str], limit: int) -> list[tuple[int, float]]:
        """``rank`` over the projects' postings in memory: the same plan and BM25, over every match (the newest
        ``cap``) rather than the best ``rescore`` by ``ts_rank``, from statistics as of this request. Only the
        phrase needs the database (its words' positions): the rows holding all its words are matched in one
        statement, which also counts the phrase's rows for its idf. Few postings are scored row by row, many in
        numpy (``NUMPY_ABOVE``: each costs less than the other on its side of it)."""
        stats = _copies_stats(copies, words, lexemes)
        plan = fts.plan_terms(" ".join(words), stats.rows, lambda ws: [stats.holding.get(w, 0) for w in ws],
                              self.budget)
        if plan is None:
            return []
        needed = list(dict.fromkeys(lexemes[w] for w in (*plan.any_of, *plan.all_of)))
        postings = sum(len(c.postings[x][0]) for c in copies for x in needed if x in c.postings)
        score = _bm25_arrays if postings > self.numpy_above else _bm25_rows
        return score(_Scoring(self, cur, tenant_id, copies, plan, lexemes, needed, stats), limit)

    def _phrase_rows(self, cur: psycopg.Cursor, tenant_id: int, project_ids: Sequence[int], phrase: str) -> int:
        key = ("phrase", tenant_id, tuple(sorted(project_ids)), phrase)
        known = self._cache.get(key)
        if known is None:
            project_sql, project_param = in_projects(project_ids)
            row = cur.execute(f"SELECT count(*) FROM items WHERE tenant_id = %s AND {project_sql}(%s)"
                              " AND fts @@ to_tsquery('english', %s)", (tenant_id, project_param, phrase)
                              ).fetchone()
            known = int(row[0]) if row else 0
            self._cache.put(key, known)
        return int(known)  # type: ignore[call-overload]


@dataclass(frozen=True)
class _Scoring:
    """What both BM25 scorers of the copies need: the plan, its lexemes, the statistics and the words' weights."""

    leg: KeywordLeg
    cur: psycopg.Cursor
    tenant_id: int
    copies: list[ProjectCopy]
    plan: fts.MatchPlan
    lexemes: dict[str, str]
    needed: list[str]
    stats: Stats

    @property
    def mean(self) -> float:
        return self.stats.mean_words or 1.0

    @property
    def weight(self) -> dict[str, float]:
        rows, holding = self.stats.rows, self.stats.holding
        return {w: bm25.idf(rows, holding.get(w, 0)) for w in (*self.plan.any_of, *self.plan.all_of)}

    @property
    def phrase_words(self) -> set[str]:
        return {self.lexemes[w] for w in self.plan.phrase.split()} if self.plan.phrase is not None else set()

    def in_phrase(self, holders: Sequence[int]) -> tuple[set[int], float]:
        """Which of ``holders`` (rows holding every word of the phrase) hold the phrase, and its idf."""
        if not holders or self.plan.phrase is None:
            return set(), 0.0
        phrase = " <-> ".join(_quoted(w) for w in self.plan.phrase.split())
        found = {int(r[0]) for r in self.cur.execute(
            "SELECT id FROM items WHERE tenant_id = %s AND id = ANY(%s) AND fts @@ to_tsquery('english', %s)",
            (self.tenant_id, list(holders), phrase)).fetchall()}
        return found, bm25.idf(self.stats.rows, len(found))


def _bm25_rows(run: _Scoring, limit: int) -> list[tuple[int, float]]:
    """The copies' matches scored one by one (a few hundred postings: less overhead than arrays)."""
    plan, lexemes = run.plan, run.lexemes
    any_of = {lexemes[w] for w in plan.any_of}
    all_of = {lexemes[w] for w in plan.all_of}
    found: list[tuple[int, int, dict[str, float]]] = []  # (item id, length, lexeme -> weighted occurrences)
    for copy in run.copies:
        per_row: dict[int, dict[str, float]] = {}
        for lexeme in run.needed:
            for row, f in copy.matches(lexeme):
                per_row.setdefault(row, {})[lexeme] = f
        for row, f in per_row.items():
            if not any_of.isdisjoint(f) or (all_of and all_of <= f.keys()):
                found.append((copy.ids[row], copy.lengths[row], f))
    if len(found) > run.leg.cap:
        found = sorted(found, key=lambda hit: -hit[0])[:run.leg.cap]
    phrase_words = run.phrase_words
    in_phrase, phrase_idf = run.in_phrase([i for i, _, f in found if phrase_words and phrase_words <= f.keys()])
    mean, weight = run.mean, run.weight
    scored = [(int(item_id), _bm25_row(plan, lexemes, weight, mean, f, length,
                                       phrase_idf if item_id in in_phrase else None))
              for item_id, length, f in found]
    scored.sort(key=lambda hit: (-hit[1], -hit[0]))
    return scored[:limit]


def _bm25_row(plan: fts.MatchPlan, lexemes: dict[str, str], weight: dict[str, float], mean: float,
              f: dict[str, float], length: int, phrase_idf: float | None) -> float:
    """One row's BM25 (``f``: its lexemes' weighted occurrences; ``phrase_idf`` when it holds the phrase), as
    SQL's re-scoring and the copies' row-by-row scorer both compute it (``_bm25_arrays`` adds the same terms in
    the same order)."""
    norm = bm25.length_norm(float(length), mean)
    score = sum(weight[w] * bm25.term(f.get(lexemes[w], 0.0), norm) for w in plan.any_of)
    if plan.all_of and all(f.get(lexemes[w], 0.0) > 0 for w in plan.all_of):
        score += sum(weight[w] * bm25.term(f[lexemes[w]], norm) for w in plan.all_of)
    if phrase_idf is not None:
        score += phrase_idf * bm25.term(1.0, norm)
    return score


def _bm25_arrays(run: _Scoring, limit: int) -> list[tuple[int, float]]:
    """The copies' matches scored in numpy, summed in the same order as ``_bm25_rows`` (many postings)."""
    plan, lexemes, mean, weight = run.plan, run.lexemes, run.mean, run.weight
    phrase_words = run.phrase_words
    found_ids, found_scores, found_norms, holders = [], [], [], []
    for copy in run.copies:
        ids, lengths, f = copy.occurrences(run.needed)
        hit = np.zeros(len(ids), bool)
        for w in plan.any_of:
            hit |= f[lexemes[w]] > 0
        every = np.ones(len(ids), bool) if plan.all_of else np.zeros(len(ids), bool)
        for w in plan.all_of:
            every &= f[lexemes[w]] > 0
        rows = np.nonzero(hit | every)[0]
        norm = bm25.length_norm(lengths[rows], mean)
        score = np.zeros(len(rows))
        for w in plan.any_of:
            score += weight[w] * bm25.terms(f[lexemes[w]][rows], norm)
        if plan.all_of:
            extra = np.zeros(len(rows))
            for w in plan.all_of:
                extra += weight[w] * bm25.terms(f[lexemes[w]][rows], norm)
            score += np.where(every[rows], extra, 0.0)
        found_ids.append(ids[rows])
        found_scores.append(score)
        found_norms.append(norm)
        if phrase_words:
            holding_all = np.ones(len(rows), bool)
            for lexeme in phrase_words:
                holding_all &= f[lexeme][rows] > 0
            holders.append(ids[rows][holding_all])
    ids = np.concatenate(found_ids) if found_ids else np.zeros(0, np.int64)
    scores = np.concatenate(found_scores) if found_scores else np.zeros(0)
    norms = np.concatenate(found_norms) if found_norms else np.zeros(0)
    if len(ids) > run.leg.cap:  # the newest ``cap`` matches, as SQL keeps them
        newest = np.argsort(-ids, kind="stable")[:run.leg.cap]
        ids, scores, norms = ids[newest], scores[newest], norms[newest]
    phrase_holders = np.intersect1d(np.concatenate(holders), ids) if holders else np.zeros(0, np.int64)
    in_phrase, phrase_idf = run.in_phrase(phrase_holders.tolist())
    if in_phrase:
        bonus = phrase_idf * bm25.terms(np.ones(len(ids)), norms)
        scores = scores + np.where(np.isin(ids, list(in_phrase)), bonus, 0.0)
    best = np.lexsort((-ids, -scores))[:limit]  # best score first, then the newer id
    return [(int(ids[i]), float(scores[i])) for i in best]


def _copies_stats(copies: Sequence[ProjectCopy], words: Sequence[str], lexemes: dict[str, str]) -> Stats:
    rows = sum(c.rows for c in copies)
    return Stats(rows, sum(c.words for c in copies) / rows if rows else 0.0,
                 {w: sum(c.holding(lexemes[w]) for c in copies) for w in words})


def _evidence(copies: Sequence[ProjectCopy], ids: Sequence[int],
              wanted: Sequence[str]) -> tuple[dict[int, int], dict[str, set[int]]]:
    """``_evidence_sql`` answered by the copies: the creation time of each of ``ids`` they hold, and which of them
    hold each lexeme."""
    created: dict[int, int] = {}
    for item_id in ids:
        for copy in copies:
            epoch = copy.epoch_of(int(item_id))
            if epoch is not None:
                created[int(item_id)] = epoch
                break
    by_lexeme: dict[str, set[int]] = {}
    for lexeme in wanted:
        held = by_lexeme[lexeme] = set()
        for copy in copies:
            for row, _ in copy.matches(lexeme):
                if copy.ids[row] in created:
                    held.add(copy.ids[row])
    return created, by_lexeme
