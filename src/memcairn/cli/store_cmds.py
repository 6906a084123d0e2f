"""Commands over the store: add, show, forget, stats, doctor, db path (search lives in ``search_cmds``)."""

from __future__ import annotations

import click

from memcairn.cli.common import emit_json, open_store, settings
from memcairn.cli.search_cmds import ShowId, show_via_worker
from memcairn.core.errors import NotFoundError, ValidationError
from memcairn.core.models import KINDS, NewItem


class ItemId(click.ParamType):
    """An item id as searches print it: ``12`` or ``#12``."""

    name = "id"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from memcairn.search.service import parse_item_id

        try:
            return parse_item_id(value if isinstance(value, int) else str(value))
        except ValidationError as exc:
            self.fail(str(exc), param, ctx)


@click.command()
@click.option("--project", required=True, help="Project the memory belongs to.")
@click.option("--kind", type=click.Choice(KINDS), default="manual", show_default=True)
@click.option("--type", "type_", help="Sub-type, e.g. bugfix, feature, discovery, decision.")
@click.option("--title", help="One-line title.")
@click.option("--subtitle")
@click.option("--text", help="Free text (the prompt text for kind=prompt).")
@click.option("--narrative", help="What happened, in a few sentences.")
@click.option("--fact", "facts", multiple=True, help="A fact (repeatable).")
@click.option("--concept", "concepts", multiple=True, help="A concept tag (repeatable).")
@click.option("--file-read", "files_read", multiple=True, help="A file that was read (repeatable).")
@click.option("--file-modified", "files_modified", multiple=True, help="A file that was changed (repeatable).")
@click.option("--session", help="The agent's session id this memory belongs to.")
@click.option("--platform", "platform_source", help="claude-code, codex, gemini-cli, ...")
@click.option("--json", "as_json", is_flag=True, help="Print {\"id\": ..., \"created\": ...}.")
def add(project: str, kind: str, type_: str | None, title: str | None, subtitle: str | None, text: str | None,
        narrative: str | None, facts: tuple[str, ...], concepts: tuple[str, ...], files_read: tuple[str, ...],
        files_modified: tuple[str, ...], session: str | None, platform_source: str | None, as_json: bool) -> None:
    """Store one memory; an identical memory is not stored twice (its id is returned).

    Example:

    \b
        memcairn add --project demo --kind observation --type bugfix --title "Fix login" \\
            --narrative "Token expiry was compared in local time" --fact "tokens expire in UTC" --json
    """
    item = NewItem(
        project=project, kind=kind, type=type_, title=title, subtitle=subtitle, text=text, narrative=narrative,
        facts=facts, concepts=concepts, files_read=files_read, files_modified=files_modified, session=session,
        platform_source=platform_source,
    )
    with open_store() as store:
        result = store.add_item(item, revive=True)  # explicit: content deleted before is stored again
    if as_json:
        emit_json({"id": result.id, "created": result.created})
    else:
        click.echo(f"#{result.id} {'stored' if result.created else 'already stored (duplicate)'}")


@click.command()
@click.argument("ids", nargs=-1, required=True, type=ShowId())
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of full records.")
def show(ids: tuple[int | str, ...], as_json: bool) -> None:
    """Show full records, in the order asked.

    Example:

    \b
        memcairn show 12 '#7' --json
    """
    if any(isinstance(i, str) for i in ids):
        return show_via_worker(ids, as_json)
    with open_store() as store:
        items = store.get_items(list(ids))
    missing = [i for i in ids if i not in {x.id for x in items}]
    if as_json:
        emit_json([i.to_dict() for i in items])
    else:
        # Stored text is printed as one printable line per field, as every rendering does: an ANSI or OSC
        # escape captured from a tool's output must not reach the terminal (``--json`` keeps text exact).
        from memcairn.search.freshness import corrected
        from memcairn.wire.fence import clean_line

        for item in items:
            click.echo(f"#{item.id} [{item.kind}/{clean_line(item.type)}] {clean_line(item.project)}: "
                       f"{clean_line(item.title)}")
            for name in ("subtitle", "text", "narrative", "request", "investigated", "learned", "completed",
                         "next_steps", "notes"):
                value = getattr(item, name)
                if value:
                    click.echo(f"  {name}: {clean_line(value)}")
            for name in ("facts", "concepts", "files_read", "files_modified"):
                if getattr(item, name):
                    click.echo(f"  {name}: {', '.join(clean_line(v) for v in getattr(item, name))}")
            said = corrected(item, 0)
            if said is not None:
                click.echo(f"  correction: {clean_line(said.reasons[0])}")
    if missing:
        raise NotFoundError(f"not found: {', '.join(f'#{i}' for i in missing)}")


def forget_ids(ids: list[int]) -> list[int]:
    """Delete the memories through the running worker (its mirror drops them at once), else in this process;
    the ids deleted."""
    from memcairn.cli.search_cmds import running_worker

    client = running_worker(settings())
    if client is None:
        with open_store() as store:
            return store.delete_items(ids)
    deleted = []
    for item_id in ids:
        try:
            client.delete(f"/api/memory/{item_id}")
            deleted.append(item_id)
        except NotFoundError:
            pass
    return deleted


@click.command()
@click.argument("ids", nargs=-1, required=True, type=ItemId())
@click.option("--json", "as_json", is_flag=True, help='Print {"deleted": [...], "missing": [...]}.')
def forget(ids: tuple[int, ...], as_json: bool) -> None:
    """Delete memories by id, as the agents' `forget` tool does. The content stays forgotten: replaying or
    re-importing it does not bring it back (saving it again explicitly does). A running worker deletes them
    (its semantic mirror drops them at once); otherwise this process does.

    Example:

    \b
        memcairn forget 12 '#15'
    """
    wanted = list(dict.fromkeys(ids))
    deleted = forget_ids(wanted)
    missing = [i for i in wanted if i not in deleted]
    if as_json:
        emit_json({"deleted": deleted, "missing": missing})
    elif deleted:
        click.echo("deleted " + ", ".join(f"#{i}" for i in deleted))
    if missing:
        raise NotFoundError(f"no memory with id {', '.join(f'#{i}' for i in missing)} (nothing to delete)")


@click.command()
@click.option("--json", "as_json", is_flag=True)
def stats(as_json: bool) -> None:
    """Counts per kind and project, and the database size.

    Example:

    \b
        memcairn stats --json
    """
    with open_store() as store:
        data = store.stats()
    if as_json:
        emit_json(data)
        return
    click.echo(f"{data['items']} memories in {data['projects']} project(s), {data['sessions']} session(s); "
               f"{data['db_bytes'] / 1e6:.1f} MB at {data['db_path']}")
    for kind, count in data["by_kind"].items():
        click.echo(f"  {kind:<12} {count}")


@click.command()
@click.option("--fix", is_flag=True, help="Repair what can be repaired (rebuilds the keyword index).")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def doctor(ctx: click.Context, fix: bool, as_json: bool) -> None:
    """Check the store; exit 0 when healthy, 1 when a problem was found (and not fixed).

    Example:

    \b
        memcairn doctor --fix
    """
    from memcairn.install.core import registered_hooks
    from memcairn.store.doctor import run_checks
    from memcairn.wire.team_client import doctor_check

    cfg = settings()
    report = run_checks(cfg, fix=fix, registered=registered_hooks())
    report["checks"].append(doctor_check(cfg.home))
    report["healthy"] = report["healthy"] and report["checks"][-1]["status"] != "problem"
    if as_json:
        emit_json(report)
    else:
        for check in report["checks"]:
            mark = {"ok": "ok  ", "fixed": "FIXD", "problem": "FAIL", "warning": "WARN"}[check["status"]]
            click.echo(f"[{mark}] {check['name']}: {check['detail']}")
    if not report["healthy"]:
        ctx.exit(1)


@click.group()
def db() -> None:
    """The database file."""


@db.command("path")
def db_path() -> None:
    """Print the path of the SQLite database.

    Example:

    \b
        memcairn db path
    """
    click.echo(str(settings().db_path))


