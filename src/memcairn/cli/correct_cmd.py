"""``memcairn correct``: say a memory no longer holds (``store/supersede.py``), or take that back."""

from __future__ import annotations

from typing import Any

import click

from memcairn.cli.common import emit_json, open_store, settings
from memcairn.cli.search_cmds import TEAM_IDS_NEED_WORKER, ShowId
from memcairn.core.errors import ValidationError, WorkerUnavailableError
from memcairn.wire.team_client import team_id


@click.command()
@click.argument("item_id", type=ShowId())
@click.option("--why", help="Why it is wrong (or why the newer memory replaces it).")
@click.option("--by", "by", type=ShowId(), help="The memory that supersedes it.")
@click.option("--undo", is_flag=True, help="Take back the correction in effect: the memory holds again.")
@click.option("--json", "as_json", is_flag=True, help="Print the corrected memory's full record.")
def correct(item_id: int | str, why: str | None, by: int | str | None, undo: bool, as_json: bool) -> None:
    """Mark a memory wrong, or superseded by a newer one. It is not deleted: `memcairn show` still reads it, with
    why, but it leaves the SessionStart context and ranks below the others in a search. A running worker
    records it; otherwise this process does.

    Example:

    \b
        memcairn correct 12 --why "the timeout is read from config.toml, not the environment"
        memcairn correct 12 --by 15 --why "the port moved to 8080"
        memcairn correct 12 --undo
        memcairn correct team#12 --by team#15
    """
    if undo and (why or by is not None):
        raise ValidationError("--undo takes back the correction in effect: give it without --why or --by")
    if not undo and not why and by is None:
        raise ValidationError("say why the memory is wrong (--why), or which memory supersedes it (--by)")
    if isinstance(item_id, str) or isinstance(by, str):
        record = _team_via_worker(item_id, why, by, undo)
    else:
        record = _via_worker(item_id, why, by, undo)
    if record is None:
        assert isinstance(item_id, int) and not isinstance(by, str)
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


def _team_via_worker(item_id: int | str, why: str | None, by: int | str | None, undo: bool) -> dict[str, Any]:
    """A team server's memory (``team#12``), corrected on the server through the running worker."""
    from memcairn.cli.search_cmds import running_worker

    number, successor = team_id(item_id), team_id(by) if by is not None else None
    if number is None or (by is not None and successor is None):
        raise ValidationError("a team server's memory is superseded by another of the team's: --by team#15")
    client = running_worker(settings())
    if client is None:
        raise WorkerUnavailableError(f"team ids are corrected through the worker, and none is running; "
                                     f"{TEAM_IDS_NEED_WORKER}")
    body: dict[str, Any] = {"undo": True} if undo else {"why": why, "by": successor}
    answer: dict[str, Any] = client.post_json(f"/api/memory/team/{number}/correct", body)
    return answer


def _said(record: dict[str, Any], undo: bool) -> str:
    from memcairn.wire.fence import clean_line

    correction = record.get("correction") or {}
    team = record.get("source") == "team"
    if undo:
        return f"{_ref(record['id'], team)} holds again (its correction is kept under undone)"
    if correction.get("state") == "superseded":
        said = f"{_ref(record['id'], team)} superseded by {_ref(correction.get('by'), team)}"
    else:
        said = f"{_ref(record['id'], team)} marked {correction.get('state')}"
    return said + (f": {clean_line(correction['why'])}" if correction.get("why") else "")


def _ref(value: object, team: bool) -> str:
    """``#12``, or ``team#12`` for a team server's memory (its record's id is that already)."""
    shown = str(value).removeprefix("team").lstrip("#")
    return f"team#{shown}" if team else f"#{shown}"
