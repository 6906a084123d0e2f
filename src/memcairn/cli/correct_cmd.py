"""``memcairn correct``: say a memory no longer holds (``store/supersede.py``), or take that back."""

from __future__ import annotations

from typing import Any

import click

from memcairn.cli.common import emit_json, open_store, settings
from memcairn.cli.store_cmds import ItemId
from memcairn.core.errors import ValidationError


@click.command()
@click.argument("item_id", type=ItemId())
@click.option("--why", help="Why it is wrong (or why the newer memory replaces it).")
@click.option("--by", "by", type=ItemId(), help="The memory that supersedes it.")
@click.option("--undo", is_flag=True, help="Take back the correction in effect: the memory holds again.")
@click.option("--json", "as_json", is_flag=True, help="Print the corrected memory's full record.")
def correct(item_id: int, why: str | None, by: int | None, undo: bool, as_json: bool) -> None:
    """Mark a memory wrong, or superseded by a newer one. It is not deleted: `memcairn show` still reads it, with
    why, but it leaves the SessionStart context and ranks below the others in a search. A running worker
    records it; otherwise this process does.

    Example:

    \b
        memcairn correct 12 --why "the timeout is read from config.toml, not the environment"
        memcairn correct 12 --by 15 --why "the port moved to 8080"
        memcairn correct 12 --undo
    """
    if undo and (why or by is not None):
        raise ValidationError("--undo takes back the correction in effect: give it without --why or --by")
    if not undo and not why and by is None:
        raise ValidationError("say why the memory is wrong (--why), or which memory supersedes it (--by)")
    record = _via_worker(item_id, why, by, undo)
    if record is None:
        from memcairn.search.records import raw_record
        from memcairn.store import supersede

        with open_store() as store:
            item = supersede.undo(store, item_id) if undo else supersede.correct(store, item_id, why=why, by=by)
        record = raw_record(item)
    if as_json:
        emit_json(record)
    else:
        click.echo(_said(record, undo))


def _via_worker(item_id: int, why: str | None, by: int | None, undo: bool) -> dict[str, Any] | None:
    from memcairn.cli.search_cmds import running_worker

    client = running_worker(settings())
    if client is None:
        return None
    body: dict[str, Any] = {"undo": True} if undo else {"why": why, "by": by}
    answer: dict[str, Any] = client.post_json(f"/api/memory/{item_id}/correct", body)
    return answer


def _said(record: dict[str, Any], undo: bool) -> str:
    from memcairn.wire.fence import clean_line

    correction = record.get("correction") or {}
    if undo:
        return f"#{record['id']} holds again (its correction is kept under undone)"
    if correction.get("state") == "superseded":
        said = f"#{record['id']} superseded by #{correction.get('by')}"
    else:
        said = f"#{record['id']} marked {correction.get('state')}"
    return said + (f": {clean_line(correction['why'])}" if correction.get("why") else "")
