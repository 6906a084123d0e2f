"""``memcairn demo``: the README's first command. Shows the loop on the embedded default."""

from __future__ import annotations

import click

from memcairn.cli.common import open_store, settings
from memcairn.models import ItemFilter, NewItem

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
    """Store a few sample memories, then search them and print what comes back.

    Example:

        MEMCAIRN_HOME=/tmp/memcairn-demo memcairn demo
    """
    cfg = settings()
    click.echo(f"memcairn home: {cfg.home}")
    with open_store(cfg) as store:
        results = store.add_items(_SAMPLES)
        new = sum(r.created for r in results)
        click.echo(f"stored {new} new memories ({len(results) - new} already there): "
                   + ", ".join(f"#{r.id}" for r in results))
        for query in ("login token expiry", "database locked readers"):
            click.echo(f"\nsearch: {query!r}")
            for item, score in store.keyword_search(query, ItemFilter(projects=["demo-app"]), limit=5):
                click.echo(f"  #{item.id} [{item.kind}/{item.type}] {item.title}  (score {score:.3f})")
        click.echo("\nmost recent:")
        for item in store.list_items(ItemFilter(projects=["demo-app"]), limit=5):
            click.echo(f"  #{item.id} [{item.kind}/{item.type}] {item.title}")
