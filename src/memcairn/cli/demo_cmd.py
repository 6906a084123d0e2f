"""``memcairn demo``: the README's first command. Shows the loop on the embedded default."""

from __future__ import annotations

import click

from memcairn.cli.common import settings
from memcairn.models import NewItem

_SAMPLES = [
    NewItem(project="demo-app", kind="observation", type="bugfix", title="Login failed after token refresh",
            narrative="Expiry was compared in local time while tokens carry UTC timestamps; the comparison "
                      "now uses timezone-aware UTC datetimes.",
            facts=["auth/tokens.py compares expiry in UTC", "test_refresh_token passes"],
            concepts=["problem-solution"], files_modified=["auth/tokens.py"], session="demo-1",
            platform_source="claude-code"),
    NewItem(project="demo-app", kind="observation", type="decision", title="SQLite in WAL mode for the cache",
            narrative="Readers must not block the writer, so the cache database switched to WAL with a 30 s "
                      "busy timeout.",
            facts=["PRAGMA journal_mode=WAL", "busy_timeout 30000"], concepts=["trade-off"],
            files_modified=["cache/db.py"], session="demo-1", platform_source="claude-code"),
    NewItem(project="demo-app", kind="summary", title="Fixed login and tuned the cache",
            request="Users were logged out after refreshing their token",
            learned="Token timestamps are UTC; the cache needed WAL to avoid lock errors",
            completed="Fixed expiry comparison; switched cache to WAL",
            next_steps="Add a regression test for daylight-saving transitions", session="demo-1",
            platform_source="claude-code"),
]


@click.command()
def demo() -> None:
    """Store a few sample memories, mirror them, then search them the way an agent would.

    Example:

        MEMCAIRN_HOME=/tmp/memcairn-demo memcairn demo
    """
    from memcairn.runtime import open_runtime
    from memcairn.search import SearchService, render_index, render_timeline

    cfg = settings()
    click.echo(f"memcairn home: {cfg.home}  (store {cfg.db_path.name}, mirror {cfg.vector_backend})")
    runtime = open_runtime(cfg)
    try:
        results = runtime.store.add_items(_SAMPLES)
        new = sum(r.created for r in results)
        click.echo(f"stored {new} new memories ({len(results) - new} already there): "
                   + ", ".join(f"#{r.id}" for r in results))
        if runtime.mirror is not None:
            synced = runtime.mirror.sync_pending()
            click.echo(f"mirrored {synced.documents} documents with {runtime.mirror.embedder.model_id}")
        else:
            click.echo(f"semantic mirror off: {runtime.mirror_error}")
        service = SearchService(runtime.store, runtime.mirror, recency_window_days=cfg.recency_window_days,
                                mirror_error=runtime.mirror_error)
        for query in ("why were users logged out", "database locked readers"):
            click.echo(f"\n$ memcairn search {query!r} --project demo-app\n")
            click.echo(render_index(service.search(query=query, projects=["demo-app"])))
        click.echo(f"\n$ memcairn timeline --anchor {results[1].id}\n")
        click.echo(render_timeline(service.timeline(anchor=results[1].id, projects=["demo-app"])))
    finally:
        runtime.close()
