"""``memcairn stale`` (the memories the code no longer supports, and forgetting them in one step) and
``memcairn projects root`` (where a project's working directory is on this machine, read by the freshness check).

``stale`` asks this home's worker when it runs (``GET /api/stale``: its checker's cache is warm), else checks in
this process; the output is the same either way.
"""

from __future__ import annotations

import os
from typing import Any

import click

from memcairn.cli.common import emit_json, open_store, settings
from memcairn.cli.store_cmds import forget_ids
from memcairn.core.errors import NotFoundError, ValidationError


def _stale_answer(projects: list[str] | None, states: list[str], local: bool) -> dict[str, Any]:
    from memcairn.cli.search_cmds import _ask_worker

    params = {"project": projects, "state": ",".join(states)}
    answer = _ask_worker(local, "/api/stale", params, tuple(projects or ()))
    if answer is not None and isinstance(answer.get("memories"), list):
        return answer
    from memcairn.context.freshness_check import checker_for
    from memcairn.context.stale import answer as stale_answer
    from memcairn.context.stale import unsupported

    with open_store() as store:
        return stale_answer(unsupported(store, checker_for(store), projects, states))


@click.command()
@click.option("--project", "projects", multiple=True, help="Only these projects (repeatable); default: every one.")
@click.option("--state", "state", type=click.Choice(["stale", "changed", "both"]), default="stale",
              show_default=True, help="stale: the code contradicts them; changed: their files changed since.")
@click.option("--forget", "forget", is_flag=True, help="Forget the memories listed (asks first, unless --yes).")
@click.option("--yes", is_flag=True, help="With --forget: do not ask.")
@click.option("--local", is_flag=True, help="Check in this process even when a worker is running.")
@click.option("--json", "as_json", is_flag=True, help="Print {memories: [{id, title, age, state, reasons...}], "
              "count, forget}.")
def stale(projects: tuple[str, ...], state: str, forget: bool, yes: bool, local: bool, as_json: bool) -> None:
    """List the memories the code no longer supports: a file they rest on deleted, or a name they state no
    longer in its files (a file git saw renamed is read at its new path). `memcairn projects root` says where a
    project's files are when its sessions were recorded elsewhere. Each with its id, age, state and reasons;
    forget them with --forget, or mark one wrong or superseded with `memcairn correct`.

    Example:

    \b
        memcairn stale --project shop
        memcairn stale --project shop --forget --yes
    """
    from memcairn.context.stale import render_text

    states = ["stale", "changed"] if state == "both" else [state]
    answer = _stale_answer(list(projects) or None, states, local)
    ids = [row["id"] for row in answer["memories"]]
    if as_json and not forget:
        emit_json(answer)
        return
    if not forget:
        click.echo(render_text(answer), nl=False)
        return
    if not as_json:
        click.echo(render_text(answer, forget_hint=""), nl=False)
    if not ids:
        if as_json:
            emit_json({**answer, "deleted": []})
        return
    if not yes and not click.confirm(f"Forget these {len(ids)} memories?", default=False, err=True):
        raise click.Abort()
    deleted = forget_ids(ids)
    if as_json:
        emit_json({**answer, "deleted": deleted})
    else:
        click.echo("deleted " + ", ".join(f"#{i}" for i in deleted))


@click.group()
def projects() -> None:
    """Projects of the store."""


@projects.command("root")
@click.argument("name")
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=str))
@click.option("--clear", is_flag=True, help="Forget the recorded directory: read where each memory was made.")
def projects_root(name: str, directory: str | None, clear: bool) -> None:
    """Record where project NAME's working directory is on this machine: the freshness of its memories is
    checked against the files there (by default, where each memory was captured: the hook's cwd, or an
    import's --root). Without DIRECTORY, print the recorded one.

    Example:

    \b
        memcairn projects root spotter ~/src/spotter
    """
    if directory is not None and clear:
        raise ValidationError("give a directory or --clear, not both")
    from memcairn.store import Store

    with Store(settings().db_path) as store:
        if directory is None and not clear:
            known = store.project_roots()
            if name not in {p.name for p in store.projects()}:
                raise NotFoundError(f"no project named {name!r}; see `memcairn stats` for the list")
            click.echo(known.get(name) or f"{name}: no directory recorded (each memory's own is read)")
            return
        root = None
        if directory is not None:
            root = os.path.abspath(os.path.expanduser(directory))
            if not os.path.isdir(root):
                raise ValidationError(f"{root} is not a directory on this machine")
        store.set_project_root(name, root)
    click.echo(f"{name}: {root}" if root else f"{name}: no directory recorded (each memory's own is read)")
