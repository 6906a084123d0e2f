"""``memcairn bench longmemeval``: session retrieval on LongMemEval-format data, through the real store,
vector mirror and search service.

For each question a fresh store (a temp directory holding the SQLite file and, by default, the sqlite-vec
mirror) receives that question's haystack sessions, timestamped with their ``haystack_dates``; the mirror is
filled with ``MirrorSync.backfill()``; the question is then searched at ``now = question_date``. Hits (items)
map to distinct haystack session ids in rank order, and the metrics compare those with
``answer_session_ids``. ``--pooled`` puts every question's haystack (sessions deduplicated by id) into one
store and searches each question against all of it. Questions whose id ends in ``_abs`` are not scored.

Metrics, per question, on the ranked distinct sessions ``r_1, r_2, ...`` and the gold set ``G``:

- ``recall_any@k`` = 1 if some ``r_i`` (i <= k) is in G, else 0;
- ``recall_all@k`` = 1 if every session of G is among ``r_1..r_k``, else 0;
- ``ndcg_any@k`` = DCG@k / IDCG@k with binary relevance, DCG@k = sum over i <= k of [r_i in G] / log2(i + 1)
  and IDCG@k the same sum for an ideal ranking (min(k, |G|) relevant sessions first).

Averages are reported overall and per question type.

How a session becomes memory items is the ``granularity`` (several, comma-separated, store the items of each):

- ``turn`` (default): one item per message, as memcairn stores an agent's session: user messages as ``prompt``
  items, assistant messages as observations. It measured best of the four on the LongMemEval_S subset
  (hybrid, per-question stores, and pooled);
- ``round``: one observation per round, i.e. a user message and the assistant replies that follow it; the
  user message is the ``narrative`` and the replies the ``text``, so the mirror embeds them separately;
- ``session``: one observation per session whose ``facts`` are its messages: the keyword index sees the
  whole conversation as one document, the mirror embeds every message as a document of its own (``fact_<i>``);
- ``user``: user messages only, as ``prompt`` items (assistant text is not stored at all).

The four embed the same texts (each message, chunked by the mirror), so one filled cache serves them all.

Every item carries the haystack session id as its ``session`` (and in ``metadata``), ``platform_source``
``longmemeval`` and one project. Document vectors go through an ``EmbeddingCache`` (by default
``MEMCAIRN_HOME/bench-cache/embeddings.sqlite``), so a re-run, or ``--pooled`` after a per-question run,
embeds nothing twice.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memcairn.bench.timing import percentile
from memcairn.core.errors import ValidationError
from memcairn.core.models import NewItem
from memcairn.search import SearchRequest, SearchService
from memcairn.search.request import parse_time
from memcairn.store import Store
from memcairn.store.validation import MAX_FIELD_BYTES

METHODS = ("keyword", "semantic", "hybrid")
GRANULARITIES = ("round", "session", "turn", "user")
DEFAULT_GRANULARITY = "turn"
INDEXES = ("sqlite-vec", "memory")
KS = (1, 3, 5, 10)
METRICS = tuple(f"{name}@{k}" for name in ("recall_any", "recall_all", "ndcg_any") for k in KS)
TABLE_METRICS = ("recall_any@1", "recall_any@3", "recall_any@5", "recall_any@10", "recall_all@5",
                 "recall_all@10", "ndcg_any@5", "ndcg_any@10")
_FIELD_BUDGET = MAX_FIELD_BYTES - 64  # bytes of a stored field (JSON-encoded for facts), with some room
_PIECE_CHARS = MAX_FIELD_BYTES // 8  # a piece of an oversized message: at most 6 bytes a character as JSON
PROJECT = "longmemeval"
PLATFORM = "longmemeval"
ITEM_TYPE = "conversation"
HITS_PER_QUERY = 100  # the service's most per page: enough to fill the top 10 distinct sessions
TOP_SESSIONS = max(KS)
_DATE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]+\))?\s*(?:(\d{1,2}):(\d{2})(?::(\d{2}))?)?\s*$")

Progress = Callable[[str], None]


# ----------------------------------------------------------------------------------------- the data
@dataclass(frozen=True)
class Session:
    id: str
    epoch_ms: int
    turns: tuple[tuple[str, str], ...]  # (role, content)


@dataclass(frozen=True)
class Question:
    id: str
    type: str
    text: str
    now_ms: int
    sessions: tuple[Session, ...]
    answer_ids: tuple[str, ...]

    @property
    def scored(self) -> bool:
        """Abstention questions (``_abs``) have no evidence to retrieve; questions without gold neither."""
        return not self.id.endswith("_abs") and bool(self.answer_ids)


def parse_date(value: Any) -> int:
    """Epoch ms (UTC) for a LongMemEval date such as ``2023/05/30 (Tue) 10:18``; ISO forms work too.

    Raises:
        ValidationError: the value is not a date in either form.
    """
    if isinstance(value, str):
        match = _DATE.match(value)
        if match:
            year, month, day, hour, minute, second = (int(g) if g else 0 for g in match.groups())
            try:
                parsed = int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp() * 1000)
            except ValueError:
                raise ValidationError(f"{value!r} is not a calendar date") from None
            if parsed < 0:
                raise ValidationError(f"{value!r} is before 1970, which the store cannot hold")
            return parsed
    parsed = parse_time(value, tz=UTC, what="date")
    if parsed is None:
        raise ValidationError("a date is empty")
    return parsed


def _date(value: Any, where: str) -> int:
    try:
        return parse_date(value)
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc}") from None


def _turns(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, list):
        raise ValidationError(f"{where}: a haystack session must be a list of turns")
    out = []
    for n, turn in enumerate(raw):
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), str):
            raise ValidationError(f"{where}, turn {n}: a turn is an object with 'role' and 'content'")
        out.append((str(turn.get("role") or "user"), turn["content"]))
    return tuple(out)


def _text(value: Any, where: str, what: str) -> str:
    """A non-empty string (numbers are taken as their text, as LongMemEval's ids and answers sometimes are)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float) or not str(value).strip():
        raise ValidationError(f"{where}: {what} must be a non-empty string, got {json.dumps(value)[:60]}")
    return str(value)


def parse_questions(data: Any) -> list[Question]:
    """Questions from parsed LongMemEval JSON (a list of records).

    Raises:
        ValidationError: a record lacks a field, a field has the wrong shape or its lists disagree in length;
            the message names the record's index and question id.
    """
    if not isinstance(data, list):
        raise ValidationError("a LongMemEval file holds a JSON list of question records (or one record a line, "
                              f"JSONL), not a JSON {type(data).__name__}")
    questions = []
    for n, rec in enumerate(data):
        where = f"record {n}"
        if not isinstance(rec, dict):
            raise ValidationError(f"{where} is not an object")
        missing = [k for k in ("question_id", "question_type", "question", "question_date", "haystack_session_ids",
                               "haystack_dates", "haystack_sessions", "answer_session_ids") if k not in rec]
        if missing:
            qid = rec.get("question_id")
            raise ValidationError(f"{where}{f' (question {qid})' if qid is not None else ''} lacks "
                                  f"{', '.join(missing)}")
        qid = _text(rec["question_id"], where, "question_id")
        where = f"record {n}, question {qid}"
        ids, dates, raw = rec["haystack_session_ids"], rec["haystack_dates"], rec["haystack_sessions"]
        if not (isinstance(ids, list) and isinstance(dates, list) and isinstance(raw, list)
                and len(ids) == len(dates) == len(raw)):
            raise ValidationError(f"{where}: haystack_session_ids, haystack_dates and haystack_sessions must be "
                                  "lists of the same length")
        gold = rec["answer_session_ids"]
        if gold is None:
            gold = []
        if not isinstance(gold, list):
            raise ValidationError(f"{where}: answer_session_ids must be a list of session ids, got "
                                  f"{json.dumps(gold)[:60]}")
        sessions = []
        for m, (sid, date, turns) in enumerate(zip(ids, dates, raw, strict=True)):
            sid = _text(sid, f"{where}, session {m}", "the haystack session id")
            sessions.append(Session(sid, _date(date, f"{where}, session {sid}: haystack date"),
                                    _turns(turns, f"{where}, session {sid}")))
        questions.append(Question(
            id=qid, type=_text(rec["question_type"], where, "question_type"),
            text=_text(rec["question"], where, "question"),
            now_ms=_date(rec["question_date"], f"{where}: question_date"), sessions=tuple(sessions),
            answer_ids=tuple(_text(a, where, "an answer session id") for a in gold),
        ))
    return questions


def read_records(path: str | Path) -> Any:
    """The parsed content of a LongMemEval file: JSON (a UTF-8 byte-order mark is allowed), or JSONL (one
    record a line).

    Raises:
        ValidationError: the file cannot be read, is not UTF-8 or is neither JSON nor JSONL.
    """
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise ValidationError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{path} is not UTF-8 text (byte {exc.start}); a LongMemEval file is JSON") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        first = exc
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if first.msg != "Extra data" or len(lines) < 2:
        raise ValidationError(f"{path} is not JSON: {first.msg} at line {first.lineno}, column {first.colno}")
    records = []
    for n, line in lines:  # JSONL: one record a line
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{path} is neither JSON nor JSONL: line {n}: {exc.msg} at column {exc.colno}"
                                  ) from None
    return records


def load_questions(path: str | Path, limit: int | None = None) -> list[Question]:
    """The first ``limit`` questions (all when None) of a LongMemEval JSON or JSONL file.

    Raises:
        ValidationError: the file cannot be read or is not in the LongMemEval format.
    """
    data = read_records(path)
    if isinstance(data, list) and limit is not None:
        data = data[:max(limit, 0)]
    return parse_questions(data)


# -------------------------------------------------------------------------------------------- metrics
def recall_any(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    top = set(ranked[:k])
    return 1.0 if any(g in top for g in gold) else 0.0


def recall_all(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    top = set(ranked[:k])
    wanted = set(gold)
    return 1.0 if wanted and wanted <= top else 0.0


def ndcg(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    wanted = set(gold)
    if not wanted:
        return 0.0
    dcg = sum(1.0 / math.log2(i + 1) for i, sid in enumerate(ranked[:k], 1) if sid in wanted)
    ideal = sum(1.0 / math.log2(i + 1) for i in range(1, min(k, len(wanted)) + 1))
    return dcg / ideal


def score_ranking(ranked: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """Every metric of ``METRICS`` for one question (``ranked``: distinct session ids, best first)."""
    out: dict[str, float] = {}
    for k in KS:
        out[f"recall_any@{k}"] = recall_any(ranked, gold, k)
        out[f"recall_all@{k}"] = recall_all(ranked, gold, k)
        out[f"ndcg_any@{k}"] = ndcg(ranked, gold, k)
    return {m: out[m] for m in METRICS}


def _mean(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {m: round(statistics.fmean(r[m] for r in rows), 4) for m in METRICS}
    out["n"] = len(rows)
    return out


def aggregate(scored: Sequence[tuple[str, dict[str, float]]]) -> dict[str, Any]:
    """``{"overall": {...}, "by_type": {type: {...}}}`` of (question type, metrics) pairs; ``n`` counts."""
    by_type: dict[str, list[dict[str, float]]] = {}
    for qtype, metrics in scored:
        by_type.setdefault(qtype, []).append(metrics)
    return {
        "overall": _mean([m for _, m in scored]) if scored else {"n": 0},
        "by_type": {t: _mean(rows) for t, rows in sorted(by_type.items())},
    }


def distinct_sessions(session_ids: Iterable[str | None], top: int = TOP_SESSIONS) -> list[str]:
    """The first ``top`` distinct session ids, in order (items without a session are skipped)."""
    out: dict[str, None] = {}
    for sid in session_ids:
        if sid is not None and sid not in out:
            out[sid] = None
            if len(out) >= top:
                break
    return list(out)


# ------------------------------------------------------------------------------------------ the items
def check_granularity(granularity: str) -> str:
    """``granularity`` normalised (``session, turn`` -> ``session,turn``).

    Raises:
        ValidationError: a part is not one of ``GRANULARITIES``.
    """
    parts = list(dict.fromkeys(g.strip().lower() for g in str(granularity).split(",") if g.strip()))
    if not parts or any(g not in GRANULARITIES for g in parts):
        raise ValidationError(f"unknown granularity {granularity!r}; use {', '.join(GRANULARITIES)} "
                              "(or several, comma-separated)")
    return ",".join(parts)


def _size(text: str) -> int:
    """Bytes of ``text`` as the store counts a list element (JSON, UTF-8), which is never less than as text."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", errors="surrogatepass"))


def _pieces(text: str) -> list[str]:
    """``text``, cut into consecutive pieces only when it is over the store's limit for one field."""
    if _size(text) <= _FIELD_BUDGET:
        return [text]
    return [text[i:i + _PIECE_CHARS] for i in range(0, len(text), _PIECE_CHARS)]


def session_items(session: Session, granularity: str = DEFAULT_GRANULARITY) -> list[NewItem]:
    """The memory items one haystack session becomes (see the module docstring); several granularities
    separated by commas (``session,turn``) store the items of each.

    Nothing is dropped for its size: a message over the store's 256 KiB per field becomes consecutive pieces
    (as if several messages), and a session or a round of replies too long for one field continues in another
    item."""
    granularity = check_granularity(granularity)
    if "," in granularity:
        return [item for g in granularity.split(",") for item in session_items(session, g)]
    base = {"project": PROJECT, "session": session.id, "platform_source": PLATFORM}
    turns = [(role, piece) for role, text in session.turns if text.strip() for piece in _pieces(text.strip())]

    def at(n: int) -> int:  # keeps the order of a session's items in time (1 ms per turn)
        return session.epoch_ms + n

    if granularity == "session":
        groups: list[tuple[int, list[str]]] = []  # (first turn, messages), each group within one field
        size = 0
        for n, (_, text) in enumerate(turns):
            if not groups or size + _size(text) + 2 > _FIELD_BUDGET:
                groups.append((n, []))
                size = 2
            groups[-1][1].append(text)
            size += _size(text) + 2
        return [NewItem(**base, kind="observation", type=ITEM_TYPE, facts=facts, created_at_epoch=at(n),
                        metadata={"session_id": session.id} if n == 0 else {"session_id": session.id, "turn": n})
                for n, facts in groups]
    if granularity in ("turn", "user"):
        items = []
        for n, (role, text) in enumerate(turns):
            meta = {"session_id": session.id, "turn": n}
            if role == "user":
                items.append(NewItem(**base, kind="prompt", text=text, prompt_number=n, created_at_epoch=at(n),
                                     metadata=meta))
            elif granularity == "turn":
                items.append(NewItem(**base, kind="observation", type=ITEM_TYPE, text=text, created_at_epoch=at(n),
                                     metadata=meta))
        return items
    rounds: list[tuple[int, str | None, list[str]]] = []  # (first turn, user message, replies)
    size = 0  # bytes of the last round's replies, joined
    for n, (role, text) in enumerate(turns):
        if role == "user" or not rounds or size + _size(text) + 2 > _FIELD_BUDGET:
            rounds.append((n, text if role == "user" else None, [] if role == "user" else [text]))
            size = 0 if role == "user" else _size(text)
        else:
            rounds[-1][2].append(text)
            size += _size(text) + 2
    items = []
    for n, user, replies in rounds:
        reply = "\n\n".join(replies) or None
        items.append(NewItem(**base, kind="observation", type=ITEM_TYPE, narrative=user, text=reply,
                             created_at_epoch=at(n), metadata={"session_id": session.id, "turn": n}))
    return items


# -------------------------------------------------------------------------------------- the harness
class TimedEmbedder:
    """Counts the texts an embedder really embeds and the seconds it spends (wrapped by the cache)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.seconds = 0.0
        self.texts = 0
        self.chars = 0

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            return self.inner.embed_documents(texts)
        finally:
            self.seconds += time.perf_counter() - started
            self.texts += len(texts)
            self.chars += sum(len(t) for t in texts)

    def embed_query(self, text: str) -> list[float]:
        started = time.perf_counter()
        try:
            return self.inner.embed_query(text)
        finally:
            self.seconds += time.perf_counter() - started
            self.texts += 1
            self.chars += len(text)


@dataclass
class Options:
    methods: tuple[str, ...] = ("hybrid",)
    pooled: bool = False
    granularity: str = DEFAULT_GRANULARITY
    fusion: str | None = None  # None: the service's default
    recency_window_days: float = 90
    recency_boost_half_life_days: float | None = None
    index: str = "sqlite-vec"
    model: str | None = None  # None: the embedding_model setting
    cache_path: Path | None = None  # None: no cache (tests)
    keyword_index: bool = False  # rank keyword hits from the in-memory copy, as the worker does

    @property
    def needs_vectors(self) -> bool:
        return any(m != "keyword" for m in self.methods)


@dataclass
class _Clock:
    build_s: float = 0.0
    insert_s: float = 0.0
    backfill_s: float = 0.0
    items: int = 0
    documents: int = 0
    stores: int = 0
    query_ms: dict[str, list[float]] = field(default_factory=dict)


def _search(service: SearchService, question: Question, opts: Options) -> tuple[list[str], float]:
    # Scoped as an agent's search is (a project, no other filter): a filter takes another keyword path.
    req = SearchRequest(query=question.text, projects=[PROJECT], limit=HITS_PER_QUERY,
                        now=question.now_ms, fusion=opts.fusion,
                        recency_boost_half_life_days=opts.recency_boost_half_life_days)
    started = time.perf_counter()
    result = service.search(req)
    elapsed = (time.perf_counter() - started) * 1000
    return distinct_sessions(h.item.session for h in result.hits), elapsed


class _Bench:
    def __init__(self, opts: Options, progress: Progress | None) -> None:
        self.opts = opts
        self.progress = progress or (lambda _msg: None)
        self.clock = _Clock()
        self.timed: TimedEmbedder | None = None
        self.embedder: Any = None
        self.stack = ExitStack()

    def __enter__(self) -> _Bench:
        if self.opts.needs_vectors:
            from memcairn.vectors.embedder import load_embedder
            from memcairn.vectors.embedding_cache import EmbeddingCache

            self.timed = TimedEmbedder(load_embedder(self.opts.model))
            self.embedder = self.timed
            if self.opts.cache_path is not None:
                self.embedder = self.stack.enter_context(EmbeddingCache(self.timed, self.opts.cache_path))
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def build(self, sessions: Sequence[Session], workdir: Path) -> tuple[Store, Any]:
        """A store holding these sessions and, when vectors are needed, its filled mirror."""
        started = time.perf_counter()
        store = Store(workdir / "memcairn.db")
        items = [item for s in sessions for item in session_items(s, self.opts.granularity)]
        for start in range(0, len(items), 2000):
            store.add_items(items[start:start + 2000])
        if self.opts.keyword_index:
            copy = store.start_keyword_index()
            if copy is None or not copy.wait(600):
                raise RuntimeError(f"the keyword index copy was not built: {copy.status if copy else 'no file'}")
        inserted = time.perf_counter()
        mirror = None
        if self.embedder is not None:
            from memcairn.mirror.sync import MirrorSync
            from memcairn.vectors.factory import open_index

            index = open_index(self.opts.index, home=workdir, dimension=self.embedder.dimension)
            mirror = MirrorSync(store, index, self.embedder, index_key=f"bench-{self.opts.index}", concurrency=1)
            result = mirror.backfill()
            if result.failed_batches or not mirror.available:
                raise RuntimeError(f"mirror backfill failed: {result.sample_errors or mirror.last_error}")
            self.clock.documents += result.documents
        done = time.perf_counter()
        self.clock.insert_s += inserted - started
        self.clock.backfill_s += done - inserted
        self.clock.build_s += done - started
        self.clock.items += len(items)
        self.clock.stores += 1
        return store, mirror

    def services(self, store: Store, mirror: Any) -> dict[str, SearchService]:
        o = self.opts
        common = {"recency_window_days": o.recency_window_days,
                  "recency_boost_half_life_days": o.recency_boost_half_life_days}
        if o.fusion:
            common["fusion"] = o.fusion
        make = {
            "keyword": lambda: SearchService(store, mirror, legs=("keyword",), **common),
            "semantic": lambda: SearchService(store, mirror, legs=("semantic",), **common),
            "hybrid": lambda: SearchService(store, mirror, **common),
        }
        return {m: make[m]() for m in o.methods}

    def ask(self, services: dict[str, SearchService], n: int, question: Question,
            ranked: dict[str, dict[int, list[str]]]) -> None:
        """Rankings are kept by the question's index: ids may repeat in a file."""
        for method, service in services.items():
            sessions, ms = _search(service, question, self.opts)
            ranked[method][n] = sessions
            self.clock.query_ms.setdefault(method, []).append(ms)


def run(questions: Sequence[Question], opts: Options, progress: Progress | None = None) -> dict[str, Any]:
    """Build the stores, ask every question with every method, score; the JSON-ready result."""
    for method in opts.methods:
        if method not in METHODS:
            raise ValidationError(f"unknown method {method!r}; use {', '.join(METHODS)}")
    if opts.index not in INDEXES:
        raise ValidationError(f"unknown index {opts.index!r}; use {', '.join(INDEXES)}")
    opts.granularity = check_granularity(opts.granularity)
    ranked: dict[str, dict[int, list[str]]] = {m: {} for m in opts.methods}
    unreachable = [f"{q.id} ({', '.join(missing)})" for q in questions if q.scored
                   and (missing := _missing_gold(q, questions if opts.pooled else (q,)))]
    if unreachable and progress is not None:
        progress(f"warning: {len(unreachable)} question(s) name answer sessions that no haystack holds, so they "
                 f"count as misses: {'; '.join(unreachable[:5])}{' ...' if len(unreachable) > 5 else ''}")
    started = time.perf_counter()
    with _Bench(opts, progress) as bench, tempfile.TemporaryDirectory(prefix="memcairn-lme-") as tmp:
        if opts.pooled:
            # Sessions are deduplicated by id and content: a session id whose contents differ between questions
            # keeps every version (their items share the id, so a hit on either counts for it).
            pool = list(dict.fromkeys(s for q in questions for s in q.sessions))
            variants = len(pool) - len({s.id for s in pool})
            bench.progress(f"pooled store: {len(pool)} sessions" + (
                f" ({variants} more version(s) of a session id whose contents differ between questions)"
                if variants else ""))
            try:
                store, mirror = bench.build(pool, Path(tmp))
            except ValidationError as exc:
                raise ValidationError(f"pooled store: {exc}") from None
            try:
                services = bench.services(store, mirror)
                for n, q in enumerate(questions):
                    bench.ask(services, n, q, ranked)
            finally:
                _close(store, mirror)
        else:
            for n, q in enumerate(questions, 1):
                workdir = Path(tmp) / f"q{n}"
                t0 = time.perf_counter()
                try:
                    store, mirror = bench.build(q.sessions, workdir)
                except ValidationError as exc:
                    raise ValidationError(f"record {n - 1}, question {q.id}: {exc}") from None
                try:
                    bench.ask(bench.services(store, mirror), n - 1, q, ranked)
                finally:
                    _close(store, mirror)
                    shutil.rmtree(workdir, ignore_errors=True)
                embedded = bench.timed.texts if bench.timed else 0
                bench.progress(f"[{n}/{len(questions)}] {q.id} ({len(q.sessions)} sessions) "
                               f"{time.perf_counter() - t0:.1f}s, texts embedded so far: {embedded}")
        total_s = time.perf_counter() - started
        cache = bench.embedder if opts.cache_path is not None and bench.embedder is not None else None
        timing = _timing(bench, total_s, cache)
    settings = _settings(opts, questions)
    out: dict[str, Any] = {}
    for method in opts.methods:
        pairs = [(q.type, score_ranking(ranked[method][n], q.answer_ids))
                 for n, q in enumerate(questions) if q.scored]
        result = aggregate(pairs)
        lat = bench.clock.query_ms.get(method, [])
        result["timing"] = {**timing,
                            "query_median_ms": round(statistics.median(lat), 2) if lat else None,
                            "query_p95_ms": round(percentile(lat, 95), 2) if lat else None,
                            "queries": len(lat)}
        result["settings"] = settings
        result["questions"] = [_detail(q, ranked[method][n]) for n, q in enumerate(questions)]
        out[method] = result
    return out


def _missing_gold(question: Question, searched: Sequence[Question]) -> list[str]:
    """The answer session ids of ``question`` that none of the ``searched`` questions' haystacks holds."""
    held = {s.id for q in searched for s in q.sessions}
    return [sid for sid in question.answer_ids if sid not in held]


def _detail(question: Question, ranked: list[str]) -> dict[str, Any]:
    gold = set(question.answer_ids)
    return {"id": question.id, "type": question.type, "scored": question.scored, "gold": list(question.answer_ids),
            "gold_ranks": [n for n, sid in enumerate(ranked, 1) if sid in gold], "top": ranked}


def _close(store: Store, mirror: Any) -> None:
    if mirror is not None:
        mirror.index.close()
    store.close()


def _timing(bench: _Bench, total_s: float, cache: Any) -> dict[str, Any]:
    c = bench.clock
    timed = bench.timed
    return {
        "total_s": round(total_s, 2),
        "index_s": round(c.build_s, 2),
        "insert_s": round(c.insert_s, 2),
        "mirror_backfill_s": round(c.backfill_s, 2),
        "embedding_s": round(timed.seconds, 2) if timed else 0.0,
        "texts_embedded": timed.texts if timed else 0,
        "chars_embedded": timed.chars if timed else 0,
        "cache_hits": getattr(cache, "hits", None),
        "cache_misses": getattr(cache, "misses", None),
        "stores": c.stores,
        "items": c.items,
        "documents": c.documents,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def _settings(opts: Options, questions: Sequence[Question]) -> dict[str, Any]:
    return {
        "mode": "pooled" if opts.pooled else "per-question",
        "granularity": opts.granularity,
        "fusion": opts.fusion or inspect.signature(SearchService).parameters["fusion"].default,
        "recency_window_days": opts.recency_window_days,
        "recency_boost_half_life_days": opts.recency_boost_half_life_days,
        "index": opts.index if opts.needs_vectors else None,
        "model": opts.model,
        "keyword_ranking": "in-memory copy" if opts.keyword_index else "sqlite",
        "questions": len(questions),
        "scored": sum(q.scored for q in questions),
    }


def peak_rss_mb() -> float:
    """Peak resident memory of this process (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


# ----------------------------------------------------------------------------------------- rendering
def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(
        zip(row, widths, strict=True))) + " |" for row in rows]
    return "\n".join(lines)


def _cells(metrics: dict[str, Any]) -> list[str]:
    return [f"{metrics[m]:.3f}" if m in metrics else "-" for m in TABLE_METRICS]


def render(result: dict[str, Any]) -> str:
    """Markdown: the metrics of every method overall and per question type, then timings."""
    methods = list(result)
    if not methods:
        return "(no methods)"
    first = result[methods[0]]
    s = first["settings"]
    lines = [
        f"LongMemEval session retrieval: {s['mode']} stores, granularity {s['granularity']}, fusion {s['fusion']}, "
        f"recency window {s['recency_window_days']:g} d, recency boost half-life "
        f"{s['recency_boost_half_life_days'] or 'off'}, index {s['index'] or '-'}, keyword ranking "
        f"{s.get('keyword_ranking', 'sqlite')}; {s['scored']} of {s['questions']} questions scored",
        "",
        "Overall:",
        "",
        _table(["method", "n", *TABLE_METRICS],
               [[m, str(result[m]["overall"].get("n", 0)), *_cells(result[m]["overall"])] for m in methods]),
        "",
        "By question type:",
        "",
    ]
    types = sorted({t for m in methods for t in result[m]["by_type"]})
    rows = []
    for t in types:
        for m in methods:
            metrics = result[m]["by_type"].get(t)
            if metrics:
                rows.append([t, m, str(metrics["n"]), *_cells(metrics)])
    lines.append(_table(["question type", "method", "n", *TABLE_METRICS], rows))
    t = first["timing"]
    lines += [
        "",
        "Timing:",
        "",
        _table(["method", "queries", "query median ms", "query p95 ms"],
               [[m, str(result[m]["timing"]["queries"]), _num(result[m]["timing"]["query_median_ms"]),
                 _num(result[m]["timing"]["query_p95_ms"])] for m in methods]),
        "",
        f"index time {t['index_s']:.1f} s for {t['stores']} store(s), {t['items']:,} items, {t['documents']:,} "
        f"mirror documents (insert {t['insert_s']:.1f} s, mirror backfill {t['mirror_backfill_s']:.1f} s); "
        f"embedding time {t['embedding_s']:.1f} s for {t['texts_embedded']:,} texts "
        f"({t['chars_embedded']:,} chars; cache hits {_num(t['cache_hits'])}, misses {_num(t['cache_misses'])}); "
        f"total {t['total_s']:.1f} s; peak memory (ru_maxrss) {t['peak_rss_mb']:.0f} MB",
    ]
    return "\n".join(lines)


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)
