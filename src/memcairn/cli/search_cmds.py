"""``memcairn search`` and ``memcairn timeline``: thin doors onto ``memcairn.search.SearchService``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from memcairn.cli.common import emit_json, settings
from memcairn.errors import MemcairnError, StoreError

if TYPE_CHECKING:
    from memcairn.search import SearchService

ORDER_CHOICES = click.Choice(["relevance", "newest", "oldest"])


@contextlib.contextmanager
def _service() -> Iterator[SearchService]:
    """A SearchService over the store and, when it opens, the mirror (otherwise keyword + the reason)."""
    from memcairn.runtime import open_runtime
    from memcairn.search import SearchService

    cfg = settings()
    try:
        runtime = open_runtime(cfg)
    except StoreError:
        raise
    except Exception as exc:  # the mirror could not be opened: search without it, and say why
        runtime = open_runtime(cfg, with_mirror=False)
        runtime.mirror_error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, MemcairnError) else str(exc)
    try:
        yield SearchService(runtime.store, runtime.mirror, recency_window_days=cfg.recency_window_days,
                            mirror_error=runtime.mirror_error)
    finally:
        runtime.close()


@click.command()
@click.argument("query", required=False, default="")
@click.option("--project", "projects", multiple=True, help="Only these projects (repeatable); merged ones included.")
@click.option("--kind", help="observation(s), summary/summaries, prompt(s), manual or all (comma-separated ok).")
@click.option("--type", "types", multiple=True, help="Only these types, e.g. bugfix, decision (repeatable).")
@click.option("--concept", "concepts", multiple=True, help="Only items tagged with this concept (repeatable).")
@click.option("--file", "files", multiple=True, help="Only items that read or changed a path containing this.")
@click.option("--since", help="From this date: 2026-12-01, 2026-12-01T14:30, epoch seconds/ms, or 7d / 24h.")
@click.option("--until", help="Up to this date (a plain date includes that whole day).")
@click.option("--platform", "platform_source", help="Only memories from this platform, e.g. claude-code.")
@click.option("--limit", default=20, show_default=True, type=int, help="Results per page (1..100).")
@click.option("--offset", default=0, show_default=True, type=int, help="Skip this many results.")
@click.option("--order", type=ORDER_CHOICES, help="relevance (default with a query) | newest | oldest.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def search(query: str, projects: tuple[str, ...], kind: str | None, types: tuple[str, ...],
           concepts: tuple[str, ...], files: tuple[str, ...], since: str | None, until: str | None,
           platform_source: str | None, limit: int, offset: int, order: str | None, as_json: bool) -> None:
    """Search memories: keyword and semantic together, best matches first; without a query, the newest.

    Prints a compact index (one line per memory, with its id); use `memcairn timeline --anchor ID` for
    what happened around one and `memcairn show ID` for its full record. If the semantic mirror is
    unavailable the search runs on keywords alone and says so.

    Example:

        memcairn search "login token expiry" --project demo --since 30d --limit 10
    """
    from memcairn.search import SearchRequest, render_index

    req = SearchRequest(query=query, projects=projects, kinds=kind, types=types, concepts=concepts, files=files,
                        date_start=since, date_end=until, platform_source=platform_source, limit=limit,
                        offset=offset, order=order)
    with _service() as service:
        result = service.search(req)
    if as_json:
        emit_json({
            "strategy": result.strategy,
            "fallback_reason": result.fallback_reason,
            "notes": result.notes,
            "results": [
                {"id": h.item.id, "kind": h.item.kind, "type": h.item.type, "title": h.item.title,
                 "project": h.item.project, "created_at_epoch": h.item.created_at_epoch, "score": round(h.score, 6)}
                for h in result.hits
            ],
        })
        return
    click.echo(render_index(result), nl=False)


@click.command()
@click.option("--anchor", help="An item id (12 or #12), S<id> for a summary, or a date/time (2026-12-01T14:30).")
@click.option("--query", help="Anchor on the best match for this text instead.")
@click.option("--before", "depth_before", default=10, show_default=True, type=int, help="Items before (0..50).")
@click.option("--after", "depth_after", default=10, show_default=True, type=int, help="Items after (0..50).")
@click.option("--project", "projects", multiple=True, help="Only these projects (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def timeline(anchor: str | None, query: str | None, depth_before: int, depth_after: int,
             projects: tuple[str, ...], as_json: bool) -> None:
    """Show what happened around one memory: the items just before and after it, of every kind.

    Give exactly one of --anchor and --query.

    Example:

        memcairn timeline --anchor 42 --before 5 --after 5
    """
    from memcairn.search import render_timeline

    with _service() as service:
        result = service.timeline(anchor=anchor, query=query, depth_before=depth_before, depth_after=depth_after,
                                  projects=projects or None)
    if as_json:
        emit_json(result.to_dict())
        return
    click.echo(render_timeline(result), nl=False)
