"""``memcairn bench recall``: can what memcairn stored about some sessions answer questions asked a week later?

- **Store**: a fresh ``MEMCAIRN_HOME`` (a temporary directory unless ``home`` is given) and a real worker process
  on a free loopback port (offline extractor, sqlite-vec mirror). ``memcairn import transcripts`` runs as its own
  process on the transcripts (timed: that is the import time reported); the bench then waits until the queue
  holds nothing pending and the worker's mirror and keyword index caught up.
- **Per question** (``recall_facts``: the QA format and the matching rule):
  ``stored``, the share of its facts present anywhere in the store (every field of every item); ``top5``,
  whether the top-5 hits of a search for the question (``/api/search``, all projects), read as the agent reads
  them (the index rows, then the full records as ``get_observations`` returns them), hold every fact;
  ``digest``, the share of its facts in the SessionStart context of its session's project (the worker's
  ``/api/context/inject`` at the configured budget, 2,000 tokens by default; a question naming no session is
  matched against the contexts of every project); ``tokens``, what the top 5 cost (index text and full
  records, characters / 4). A question without facts is answered right when the search returns nothing.
- **Baseline** ``raw`` (``recall_raw``): BM25 over one chunk per assistant step of the same transcripts, its top 5
  scored the same way, so each run shows both side by side; and the same ranking read only as far as memcairn's
  median top-5 cost (``raw BM25 at N tokens``: its best chunks in order, the text cut at N tokens), which says
  what plain retrieval answers for what memcairn's answers cost.

Totals: ``stored`` and ``digest`` are shares of all facts, ``top5`` the share of questions with facts,
``tokens`` the median over those questions, ``no_result`` the share of fact-less questions with no hit.
"""

from __future__ import annotations

import http.client
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from memcairn.bench.hooks import free_port
from memcairn.bench.recall_facts import Question, facts_held, load_questions, normalise
from memcairn.bench.recall_raw import RawIndex
from memcairn.bench.worker import running_worker, signals_unwind, wait_ready, worker_env
from memcairn.capture.transcripts import transcripts_under

Log = Callable[[str], None]
TOP_K = 5
BUDGET_CHUNKS = 20  # chunks of the raw ranking read, at most, for the budget-matched baseline
CAPTURE_TIMEOUT = 600.0
REQUEST_TIMEOUT = 120.0
_ITEM_COLUMNS = ("title", "subtitle", "text", "narrative", "facts", "concepts", "files_read", "files_modified",
                 "request", "investigated", "learned", "completed", "next_steps", "notes")


def transcript_files(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a directory stands for every ``*.jsonl`` under it (as ``memcairn import transcripts``)."""
    out: list[Path] = []
    for path in paths:
        path = Path(path).expanduser().absolute()
        if path.is_dir():
            out += transcripts_under(path)
        elif path.is_file():
            out.append(path)
        else:
            raise ValueError(f"{path} does not exist; give transcript files (*.jsonl) or directories")
    return out


def tokens(chars: int) -> int:
    return round(chars / 4)


# -- the worker -----------------------------------------------------------------------------------------
def _request(port: int, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _get(port: int, path: str, params: dict[str, Any] | None = None) -> Any:
    status, raw = _request(port, "GET", path + ("?" + urlencode(params, doseq=True) if params else ""))
    if status != 200:
        raise RuntimeError(f"GET {path} answered {status}: {raw[:300]!r}")
    return raw.decode("utf-8", errors="replace") if path.endswith("/inject") else json.loads(raw)


def _import(home: Path, port: int, model: str, paths: Sequence[Path]) -> tuple[float, dict[str, Any]]:
    """``memcairn import transcripts --json`` in its own process; (seconds, its report)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "memcairn", "import", "transcripts", *map(str, paths), "--json"],
                          env=worker_env(home, port, model), capture_output=True, text=True, cwd=str(home))
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"memcairn import transcripts failed ({done.returncode}): {done.stderr[-1500:]}")
    try:
        return seconds, json.loads(done.stdout)
    except ValueError:
        return seconds, {"output": done.stdout[-500:]}


def _wait_capture(port: int, log: Log) -> dict[str, Any]:
    deadline = time.monotonic() + CAPTURE_TIMEOUT
    while True:
        queue = _get(port, "/api/stats").get("ingest") or {}
        if not queue.get("pending"):
            return queue
        if time.monotonic() > deadline:
            raise RuntimeError(f"capture still has {queue.get('pending')} events pending")
        log(f"waiting for capture ({queue.get('pending')} events pending) ...")
        time.sleep(1.0)


def _store_rows(db: Path) -> tuple[list[str], dict[str, str], dict[str, int]]:
    """(the text of every item, the project of each session, items per kind), read from the store file."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        texts = ["\n".join(str(v) for v in row if v not in (None, "", "[]"))
                 for row in conn.execute(f"SELECT {', '.join(_ITEM_COLUMNS)} FROM memory_items")]
        sessions = dict(conn.execute("SELECT s.agent_session_id, p.name FROM sessions s "
                                     "JOIN projects p ON p.id = s.project_id").fetchall())
        kinds = dict(conn.execute("SELECT kind, COUNT(*) FROM memory_items GROUP BY kind").fetchall())
    finally:
        conn.close()
    return texts, sessions, kinds


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _top(port: int, query: str) -> tuple[int, str, int]:
    """(hits, the text an agent reads for the top 5: index rows and full records, its characters)."""
    found = _get(port, "/api/search", {"query": query, "limit": TOP_K, "format": "json"})
    ids = [r["id"] for r in found.get("results", [])][:TOP_K]
    if not ids:
        return 0, "", 0
    index = _get(port, "/api/search", {"query": query, "limit": TOP_K, "format": "index"})["text"]
    status, raw = _request(port, "POST", "/api/observations/batch", {"ids": ids, "format": "agent"})
    if status != 200:
        raise RuntimeError(f"POST /api/observations/batch answered {status}: {raw[:300]!r}")
    # as get_observations hands them to the agent (format=agent: no uuid, hash, epochs or provenance metadata),
    # empty fields dropped
    records = [{k: v for k, v in item.items() if v not in (None, "", [], {})} for item in json.loads(raw)["items"]]
    shown = json.dumps(records, ensure_ascii=False)
    return len(ids), index + "\n" + "\n".join(_strings(records)), len(index) + len(shown)


# -- scoring --------------------------------------------------------------------------------------------
def _share(held: Sequence[bool]) -> float | None:
    return sum(held) / len(held) if held else None


def _score(question: Question, stored: str | None, top: str, hits: int, chars: int,
           digest: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"hits": hits, "tokens": tokens(chars)}
    if question.unanswerable:
        row["no_result"] = hits == 0
        return row
    top_held = facts_held(question, normalise(top))
    row.update(top5=all(top_held), top5_facts=_share(top_held))
    if stored is not None:
        row["stored"] = _share(facts_held(question, stored))
    if digest is not None:
        row["digest"] = _share(facts_held(question, digest))
    return row


def summarise(questions: Sequence[Question], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Totals of one system over the questions (see the module docstring)."""
    answerable = [(q, r) for q, r in zip(questions, rows, strict=True) if not q.unanswerable]
    empty = [r for q, r in zip(questions, rows, strict=True) if q.unanswerable]
    out: dict[str, Any] = {"questions": len(answerable), "unanswerable": len(empty)}
    facts = sum(len(q.facts) for q, _ in answerable)
    for name in ("stored", "digest"):
        if answerable and all(name in r for _, r in answerable):
            out[name] = round(sum(r[name] * len(q.facts) for q, r in answerable) / facts, 3) if facts else None
    if answerable:
        out["top5"] = round(sum(r["top5"] for _, r in answerable) / len(answerable), 3)
        out["top5_answered"] = sum(r["top5"] for _, r in answerable)
        out["tokens_median"] = round(statistics.median(r["tokens"] for _, r in answerable))
    if empty:
        out["no_result"] = round(sum(r["no_result"] for r in empty) / len(empty), 3)
    return out


def by_qa(questions: Sequence[Question], rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The totals of each QA file's questions (when several files were given, each is a set of its own)."""
    sources = list(dict.fromkeys(q.source for q in questions))
    if len(sources) < 2:
        return {}
    return {src: summarise([q for q in questions if q.source == src],
                           [r for q, r in zip(questions, rows, strict=True) if q.source == src]) for src in sources}


# -- the run --------------------------------------------------------------------------------------------
def run(qa_paths: Sequence[Path], transcripts: Sequence[Path], *, baseline: str | None = "raw",
        home: Path | None = None, model: str | None = None, log: Log = lambda _m: None) -> dict[str, Any]:
    from memcairn.config import load_settings

    questions = load_questions(qa_paths)
    files = transcript_files(transcripts)
    if not files:
        raise ValueError("no transcript files (*.jsonl) in the paths given")
    settings = load_settings()
    model = model or settings.embedding_model
    own_home = home is None
    base = Path(tempfile.mkdtemp(prefix="memcairn-bench-recall-")) if home is None else Path(home)
    base.mkdir(parents=True, exist_ok=True)
    if (base / "memcairn.db").exists():
        raise ValueError(f"{base} already holds a store; the bench needs a fresh one")
    try:
        with signals_unwind():
            result = _measure(questions, files, base, model, log)
    finally:
        if own_home:
            shutil.rmtree(base, ignore_errors=True)
    if baseline == "raw":
        started = time.perf_counter()
        index = RawIndex(files)
        budget = result["totals"].get("tokens_median") or 0
        try:
            raw_rows, cut_rows = [], []
            for q in questions:
                chunks = index.top(q.question, TOP_K)
                text = "\n".join(chunks)
                raw_rows.append(_score(q, None, text, len(chunks), len(text), None))
                cut = "\n".join(index.top(q.question, BUDGET_CHUNKS))[:budget * 4]
                cut_rows.append(_score(q, None, cut, len(chunks), len(cut), None))
            everything = normalise("\n".join(index.chunks))
            for q, row in zip(questions, raw_rows, strict=True):
                if not q.unanswerable:
                    row["stored"] = _share(facts_held(q, everything))
            result["raw"] = {"chunks": len(index.chunks), "seconds": round(time.perf_counter() - started, 2),
                             "totals": summarise(questions, raw_rows), "totals_by_qa": by_qa(questions, raw_rows)}
            result["raw_at_budget"] = {"tokens": budget, "totals": summarise(questions, cut_rows),
                                       "totals_by_qa": by_qa(questions, cut_rows)}
        finally:
            index.close()
        for row, raw in zip(result["questions"], raw_rows, strict=True):
            row["raw"] = raw
    return result


def _measure(questions: Sequence[Question], files: Sequence[Path], home: Path, model: str,
             log: Log) -> dict[str, Any]:
    port = free_port()
    with running_worker(home, port, model, log) as proc:
        wait_ready(proc, port, home, log)
        log(f"importing {len(files)} transcript files ...")
        seconds, report = _import(home, port, model, files)
        log(f"imported in {seconds:.1f} s; waiting for capture and the mirror ...")
        queue = _wait_capture(port, log)
        wait_ready(proc, port, home, log)
        texts, sessions, kinds = _store_rows(home / "memcairn.db")
        stored = normalise("\n".join(texts))
        contexts = {p["name"]: _get(port, "/api/context/inject", {"project": p["name"]})
                    for p in _get(port, "/api/projects")["projects"]}
        rows = []
        for q in questions:
            hits, top, chars = _top(port, q.question)
            project = sessions.get(q.session or "")
            digest = contexts[project] if project in contexts else "\n".join(contexts.values())
            rows.append({"id": q.id, "kind": q.kind, "facts": len(q.facts),
                         **_score(q, stored, top, hits, chars, normalise(digest))})
    return {"transcripts": [str(f) for f in files], "qa": sorted({q.source for q in questions}),
            "import": {"seconds": round(seconds, 2), "report": report, "failed_events": queue.get("failed", 0)},
            "items": kinds, "context_tokens": {p: tokens(len(t)) for p, t in contexts.items()},
            "totals": summarise(questions, rows), "totals_by_qa": by_qa(questions, rows), "questions": rows}


# -- rendering ------------------------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def render(result: dict[str, Any]) -> str:
    totals = result["totals"]
    lines = [f"import: {len(result['transcripts'])} files in {result['import']['seconds']:.1f} s; items "
             + ", ".join(f"{k} {v:,}" for k, v in sorted(result["items"].items()))
             + "; SessionStart context " + ", ".join(f"{p} {t:,} tokens" for p, t in result["context_tokens"].items()),
             "",
             "| system | questions | stored | top5 | top5 answered | median tokens (top 5) | digest | "
             "no result (no-fact questions) |",
             "|---|---|---|---|---|---|---|---|"]

    def total_row(name: str, t: dict[str, Any]) -> str:
        answered = f"{t.get('top5_answered', 0)}/{t['questions']}"
        empty = f"{_cell(t.get('no_result'))} of {t['unanswerable']}" if t["unanswerable"] else "–"
        return (f"| {name} | {t['questions']} + {t['unanswerable']} | {_cell(t.get('stored'))} | "
                f"{_cell(t.get('top5'))} | {answered} | {_cell(t.get('tokens_median'))} | {_cell(t.get('digest'))} | "
                f"{empty} |")

    lines.append(total_row("memcairn", totals))
    cut = result.get("raw_at_budget")
    if "raw" in result:
        lines.append(total_row(f"raw BM25 ({result['raw']['chunks']:,} chunks)", result["raw"]["totals"]))
    if cut:
        lines.append(total_row(f"raw BM25 at {cut['tokens']:,} tokens", cut["totals"]))
    for source, part in result.get("totals_by_qa", {}).items():
        lines.append(total_row(f"memcairn · {Path(source).name}", part))
        if "raw" in result:
            lines.append(total_row(f"raw BM25 · {Path(source).name}", result["raw"]["totals_by_qa"][source]))
        if cut:
            lines.append(total_row(f"raw BM25 at {cut['tokens']:,} tokens · {Path(source).name}",
                                   cut["totals_by_qa"][source]))
    lines += ["", "| question | kind | facts | stored | top5 | digest | tokens | raw stored | raw top5 | raw tokens |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["questions"]:
        raw = row.get("raw", {})
        top = row.get("top5", None if row["facts"] else ("no result" if row.get("no_result") else "answered"))
        raw_top = raw.get("top5", None if row["facts"] or not raw else
                          ("no result" if raw.get("no_result") else "answered"))
        lines.append(f"| {row['id']} | {row['kind'] or ''} | {row['facts']} | {_cell(row.get('stored'))} | "
                     f"{_cell(top)} | {_cell(row.get('digest'))} | {_cell(row['tokens'])} | "
                     f"{_cell(raw.get('stored'))} | {_cell(raw_top)} | {_cell(raw.get('tokens'))} |")
    return "\n".join(lines)

