"""``memcairn bench ...``: benchmarks that print tables of medians (never asserted on in tests)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from memcairn.bench.timing import render_table


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

        memcairn bench store --sizes 10k,100k
    """
    from memcairn.bench import store

    rows = store.run(_sizes(sizes), queries=queries)
    click.echo(render_table(rows))
    if json_out:
        json_out.write_text(json.dumps(rows, indent=2))


@bench.command("embed")
@click.option("--model", "models", multiple=True, help="Model ids (default: the bundled model and the fake).")
@click.option("--texts", default=256, show_default=True, help="Texts embedded for the throughput figure.")
def bench_embed(models: tuple[str, ...], texts: int) -> None:
    """Per model: load time, texts/s at batch 64, single-query latency, resident memory.

    Example:

        memcairn bench embed
    """
    from memcairn.bench import embed

    rows = embed.run(list(models) or None, n_texts=texts)
    click.echo(embed.render_table(rows))


@bench.command("mirror")
@click.option("--items", default=10_000, show_default=True, help="Synthetic observations backfilled.")
@click.option("--sizes", default="10k,100k", show_default=True, help="Document counts for query latency.")
@click.option("--backend", "backends", multiple=True, help="sqlite-vec and/or chroma (default both).")
def bench_mirror(items: int, sizes: str, backends: tuple[str, ...]) -> None:
    """Per backend: backfill through the sync layer, then query latency at several sizes.

    Example:

        memcairn bench mirror --items 2000 --sizes 10k
    """
    from memcairn.bench import mirror
    from memcairn.config import load_settings

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

        memcairn bench search --sizes 10k
    """
    from memcairn.bench import search
    from memcairn.config import load_settings

    cache = load_settings().home / "bench-cache" / "embeddings.sqlite"
    rows = search.run(_sizes(sizes), cache, queries=queries, log=lambda m: click.echo(m, err=True))
    click.echo(render_table(rows))
