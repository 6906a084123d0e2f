"""``memcairn bench recall``: can what memcairn stored about some sessions answer questions asked a week later?

- **Data sets** (``recall_sets``): one or more, each QA files with the transcripts they ask about (Claude Code,
  Codex rollouts, Gemini CLI chats), all imported into one store, each session filed under its own project (the
  questions' ``project`` or the session's name); a question is asked in its project, as an agent working there
  would ask it.
- **Store**: a fresh ``MEMCAIRN_HOME`` (a temporary directory unless ``home`` is given) and a real worker process
  on a free loopback port (offline extractor, sqlite-vec mirror). ``memcairn import transcripts --project P``
  runs as its own process per project (timed, summed: that is the import time reported); the bench then waits
  until the queue holds nothing pending and the worker's mirror and keyword index caught up.
- **Per question** (``recall_facts``: the QA format and the matching rule):
  ``stored``, the share of its facts present anywhere in its project's memory (every field of every item);
  ``top5``, whether the top-5 hits of a search for the question in its project (``/api/search``), read as the
  agent reads them (the index rows, then the full records as ``get_observations`` returns them), hold every
  fact; ``digest``, the share of its facts in the SessionStart context of its project (the worker's
  ``/api/context/inject`` at the configured budget, 2,000 tokens by default); ``tokens``, what the top 5 cost
  (index text and full records, characters / 4). A question naming no project or session is asked in every
  project of its set. A question without facts is answered right when the search returns nothing.
- **Baseline** ``raw`` (``recall_raw``): BM25 over one chunk per assistant step of the same transcripts, within
  the same projects, its top 5 scored the same way, so each run shows both side by side; and the same ranking
  read only as far as 1x and 2x memcairn's median top-5 cost on the question's set (its best chunks in order, the
  text cut there), which says what plain retrieval answers for what memcairn's answers cost.

Totals, per data set and overall: ``stored`` and ``digest`` are shares of all facts, ``top5`` the share of
questions with facts, ``tokens`` the median over those questions, ``no_result`` the share of fact-less questions
with no hit.
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
from memcairn.bench.recall_facts import Question, facts_held, normalise
from memcairn.bench.recall_raw import RawIndex
from memcairn.bench.recall_sets import DataSet, prepare, single
from memcairn.bench.worker import running_worker, signals_unwind, wait_ready, worker_env
from memcairn.core.fields import KEYWORD_FIELDS

Log = Callable[[str], None]
TOP_K = 5
BUDGET_CHUNKS = 20  # chunks of the raw ranking read, at most, for the budget-matched baseline
BUDGET_FACTORS = (1, 2)  # the raw ranking read as far as 1x and 2x what memcairn's top 5 cost
CAPTURE_TIMEOUT = 600.0
REQUEST_TIMEOUT = 120.0
_ITEM_COLUMNS = KEYWORD_FIELDS  # what the keyword index reads of an item


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


def _import(home: Path, port: int, model: str, files: dict[Path, str]) -> tuple[float, dict[str, Any]]:
    """``memcairn import transcripts --project P --json`` in its own process per project, each session filed
    under its project; (seconds of all of them, their reports summed)."""
    seconds, total = 0.0, {}
    for project in dict.fromkeys(files.values()):
        paths = [str(f) for f, p in files.items() if p == project]
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "memcairn", "import", "transcripts", *paths, "--project",
                               project, "--json"], env=worker_env(home, port, model), capture_output=True, text=True,
                              cwd=str(home))
        seconds += time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"memcairn import transcripts failed ({done.returncode}): {done.stderr[-1500:]}")
        try:
            report = json.loads(done.stdout)
        except ValueError:
            report = {"output": done.stdout[-500:]}
        for key, value in report.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
            elif isinstance(value, list):
                total[key] = total.get(key, []) + value
            else:
                total.setdefault(key, value)
    return seconds, total


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


def _store_rows(db: Path) -> tuple[dict[str, str], dict[str, int]]:
    """(the normalised text of every item of each project, items per kind), read from the store file."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    texts: dict[str, list[str]] = {}
    try:
        for project, *row in conn.execute(f"SELECT p.name, {', '.join('i.' + c for c in _ITEM_COLUMNS)} "
                                          "FROM memory_items i JOIN projects p ON p.id = i.project_id"):
            texts.setdefault(project, []).append("\n".join(str(v) for v in row if v not in (None, "", "[]")))
        kinds = dict(conn.execute("SELECT kind, COUNT(*) FROM memory_items GROUP BY kind").fetchall())
        # the evidence kept behind the memories is in memory too: a search quotes its matching lines
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'evidence'").fetchone():
            for project, text in conn.execute("SELECT p.name, e.text FROM evidence e "
                                              "JOIN projects p ON p.id = e.project_id"):
                texts.setdefault(project, []).append(text)
            count, chars = conn.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(text)), 0) FROM evidence").fetchone()
            kinds["evidence steps"], kinds["evidence KB"] = count, round(chars / 1024)
    finally:
        conn.close()
    return {p: normalise("\n".join(t)) for p, t in texts.items()}, kinds


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _top(port: int, query: str, projects: Sequence[str]) -> tuple[int, str, int]:
    """(hits, the text an agent reads for the top 5 of a search in ``projects``: index rows and full records, its
    characters)."""
    params = {"query": query, "limit": TOP_K, "project": list(projects)}
    found = _get(port, "/api/search", {**params, "format": "json"})
    ids = [r["id"] for r in found.get("results", [])][:TOP_K]
    if not ids:
        return 0, "", 0
    index = _get(port, "/api/search", {**params, "format": "index"})["text"]
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


def grouped(questions: Sequence[Question], rows: Sequence[dict[str, Any]],
            key: Callable[[Question], str]) -> dict[str, dict[str, Any]]:
    """The totals of each group of questions (by data set, by QA file); none when there is only one group."""
    groups = list(dict.fromkeys(key(q) for q in questions))
    if len(groups) < 2:
        return {}
    return {g: summarise([q for q in questions if key(q) == g],
                         [r for q, r in zip(questions, rows, strict=True) if key(q) == g]) for g in groups}


def _totals(questions: Sequence[Question], rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"totals": summarise(questions, rows), "totals_by_set": grouped(questions, rows, lambda q: q.dataset),
            "totals_by_qa": grouped(questions, rows, lambda q: q.source)}


def _asked_in(q: Question, sets: dict[str, DataSet]) -> list[str]:
    """The projects ``q`` is asked in: its own, else every project of its set."""
    return [q.project] if q.project else sets[q.dataset].project_names


# -- the run --------------------------------------------------------------------------------------------
def run(qa_paths: Sequence[Path] = (), transcripts: Sequence[Path] = (), *, sets: Sequence[DataSet] = (),
        baseline: str | None = "raw", home: Path | None = None, model: str | None = None,
        worker_settings: dict[str, Any] | None = None, log: Log = lambda _m: None) -> dict[str, Any]:
    """Measure memcairn (and the raw anchor) on ``sets``, and on the one set of ``qa_paths`` and ``transcripts``
    when given, all in one store (see ``recall_sets`` for how sessions are filed into projects). ``worker_settings``
    are the worker's own (its ``settings.json``), to compare configurations in one way of asking."""
    from memcairn.wire.config import load_settings

    given = ([single(qa_paths, transcripts)] if qa_paths else []) + list(sets)
    if not given:
        raise ValueError("no data set: give QA.json TRANSCRIPTS... or --set QA.json:TRANSCRIPTS")
    prepared = {s.name: s for s in prepare(given)}
    questions = [q for s in prepared.values() for q in s.questions]
    files = {f: p for s in prepared.values() for f, p in s.projects.items()}
    settings = load_settings()
    model = model or settings.embedding_model
    own_home = home is None
    base = Path(tempfile.mkdtemp(prefix="memcairn-bench-recall-")) if home is None else Path(home)
    base.mkdir(parents=True, exist_ok=True)
    if (base / "memcairn.db").exists():
        raise ValueError(f"{base} already holds a store; the bench needs a fresh one")
    if worker_settings:
        (base / "settings.json").write_text(json.dumps(worker_settings), encoding="utf-8")
    try:
        with signals_unwind():
            result = _measure(questions, prepared, files, base, model, log)
    finally:
        if own_home:
            shutil.rmtree(base, ignore_errors=True)
    if baseline == "raw":
        _raw(result, questions, prepared, files)
    return result


def _raw(result: dict[str, Any], questions: Sequence[Question], sets: dict[str, DataSet],
         files: dict[Path, str]) -> None:
    """The raw anchor beside memcairn's rows: its top 5, and its ranking cut at 1x and 2x the median tokens of
    memcairn's top 5 on the question's set."""
    started = time.perf_counter()
    index = RawIndex(files)
    medians = {name: (result["totals_by_set"].get(name) or result["totals"]).get("tokens_median") or 0
               for name in sets}
    try:
        raw_rows: list[dict[str, Any]] = []
        cut_rows: dict[int, list[dict[str, Any]]] = {factor: [] for factor in BUDGET_FACTORS}
        for q in questions:
            projects = _asked_in(q, sets)
            chunks = index.top(q.question, TOP_K, projects)
            text = "\n".join(chunks)
            row = _score(q, None, text, len(chunks), len(text), None)
            if not q.unanswerable:
                row["stored"] = _share(facts_held(q, normalise(index.text_of(projects))))
            raw_rows.append(row)
            ranked = "\n".join(index.top(q.question, BUDGET_CHUNKS, projects))
            for factor, rows in cut_rows.items():
                cut = ranked[:medians[q.dataset] * factor * 4]
                rows.append(_score(q, None, cut, len(chunks), len(cut), None))
        result["raw"] = {"chunks": len(index.chunks), "seconds": round(time.perf_counter() - started, 2),
                         "chunks_by_set": {name: sum(p in s.project_names for p in index.projects)
                                           for name, s in sets.items()}, **_totals(questions, raw_rows)}
        result["raw_at_budget"] = [{"factor": factor, "tokens": result["totals"].get("tokens_median") or 0,
                                    "tokens_by_set": medians, **_totals(questions, rows)}
                                   for factor, rows in cut_rows.items()]
    finally:
        index.close()
    for row, raw in zip(result["questions"], raw_rows, strict=True):
        row["raw"] = raw


def _measure(questions: Sequence[Question], sets: dict[str, DataSet], files: dict[Path, str], home: Path,
             model: str, log: Log) -> dict[str, Any]:
    port = free_port()
    with running_worker(home, port, model, log) as proc:
        wait_ready(proc, port, home, log)
        log(f"importing {len(files)} transcript files into {len(set(files.values()))} projects ...")
        seconds, report = _import(home, port, model, files)
        log(f"imported in {seconds:.1f} s; waiting for capture and the mirror ...")
        queue = _wait_capture(port, log)
        wait_ready(proc, port, home, log)
        stored, kinds = _store_rows(home / "memcairn.db")
        contexts = {p: _get(port, "/api/context/inject", {"project": p}) for p in dict.fromkeys(files.values())}
        rows = []
        for q in questions:
            projects = _asked_in(q, sets)
            hits, top, chars = _top(port, q.question, projects)
            digest = "\n".join(contexts.get(p, "") for p in projects)
            rows.append({"id": q.id, "set": q.dataset, "project": q.project, "kind": q.kind, "facts": len(q.facts),
                         **_score(q, "\n".join(stored.get(p, "") for p in projects), top, hits, chars,
                                  normalise(digest))})
    return {"sets": [{"name": s.name, "qa": [str(p) for p in s.qa], "projects": {str(f): p for f, p in
                                                                                 s.projects.items()}}
                     for s in sets.values()],
            "transcripts": [str(f) for f in files], "qa": sorted({q.source for q in questions}),
            "import": {"seconds": round(seconds, 2), "report": report, "failed_events": queue.get("failed", 0)},
            "items": kinds, "context_tokens": {p: tokens(len(t)) for p, t in contexts.items()},
            **_totals(questions, rows), "questions": rows}


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
    lines = [f"import: {len(result['transcripts'])} files in {result['import']['seconds']:.1f} s; items "
             + ", ".join(f"{k} {v:,}" for k, v in sorted(result["items"].items()))
             + "; SessionStart context " + ", ".join(f"{p} {t:,} tokens" for p, t in result["context_tokens"].items()),
             "",
             "| set | system | questions | stored | top5 | top5 answered | median tokens (top 5) | digest | "
             "no result (no-fact questions) |",
             "|---|---|---|---|---|---|---|---|---|"]

    def total_row(group: str, name: str, t: dict[str, Any]) -> str:
        answered = f"{t.get('top5_answered', 0)}/{t['questions']}"
        empty = f"{_cell(t.get('no_result'))} of {t['unanswerable']}" if t["unanswerable"] else "–"
        return (f"| {group} | {name} | {t['questions']} + {t['unanswerable']} | {_cell(t.get('stored'))} | "
                f"{_cell(t.get('top5'))} | {answered} | {_cell(t.get('tokens_median'))} | {_cell(t.get('digest'))} | "
                f"{empty} |")

    def rows_of(group: str, pick: Callable[[dict[str, Any]], dict[str, Any]],
                budget_of: Callable[[dict[str, Any]], int | None]) -> None:
        lines.append(total_row(group, "memcairn", pick(result)))
        if "raw" in result:
            chunks = result["raw"]["chunks_by_set"].get(group, result["raw"]["chunks"])
            lines.append(total_row(group, f"raw BM25 ({chunks:,} chunks)", pick(result["raw"])))
        for cut in result.get("raw_at_budget", ()):
            budget = budget_of(cut)
            shown = "each set's" if budget is None else f"{budget * cut['factor']:,} tokens"
            lines.append(total_row(group, f"raw BM25 at {cut['factor']}x memcairn's tokens ({shown})", pick(cut)))

    by_set = result.get("totals_by_set", {})
    for name in by_set:
        rows_of(name, lambda part, n=name: part["totals_by_set"][n], lambda cut, n=name: cut["tokens_by_set"][n])
    rows_of("overall" if by_set else result["sets"][0]["name"], lambda part: part["totals"],
            lambda cut: None if by_set else cut["tokens"])
    if len(result.get("totals_by_qa", {})) > max(len(by_set), 1):
        for source in result["totals_by_qa"]:
            lines.append(total_row(Path(source).name, "memcairn", result["totals_by_qa"][source]))
            if "raw" in result:
                lines.append(total_row(Path(source).name, "raw BM25", result["raw"]["totals_by_qa"][source]))
    top5s = [t["top5"] for t in by_set.values() if t.get("top5") is not None]
    if len(top5s) > 1:
        lines += ["", f"top5 gap between the best and the worst set (memcairn): {max(top5s) - min(top5s):.2f}"]
    lines += ["", "| set | question | kind | facts | stored | top5 | digest | tokens | raw stored | raw top5 | "
              "raw tokens |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in result["questions"]:
        raw = row.get("raw", {})
        top = row.get("top5", None if row["facts"] else ("no result" if row.get("no_result") else "answered"))
        raw_top = raw.get("top5", None if row["facts"] or not raw else
                          ("no result" if raw.get("no_result") else "answered"))
        lines.append(f"| {row['set']} | {row['id']} | {row['kind'] or ''} | {row['facts']} | "
                     f"{_cell(row.get('stored'))} | {_cell(top)} | {_cell(row.get('digest'))} | "
                     f"{_cell(row['tokens'])} | {_cell(raw.get('stored'))} | {_cell(raw_top)} | "
                     f"{_cell(raw.get('tokens'))} |")
    return "\n".join(lines)
