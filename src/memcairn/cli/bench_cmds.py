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
