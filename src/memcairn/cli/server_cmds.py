"""`memcairn server`: the team server in the foreground, and its API keys (`memcairn server keys ...`)."""

from __future__ import annotations

import sys
from typing import Any

import click

from memcairn.cli.common import emit_json
from memcairn.config import memcairn_home

_DATABASE = click.option("--database", metavar="URL", envvar="MEMCAIRN_SERVER_DATABASE",
                         help="postgresql://... of an existing PostgreSQL (default: the embedded one under "
                              "MEMCAIRN_HOME)")


@click.group("server", invoke_without_command=True)
@click.option("--embedded", is_flag=True, help="Run the bundled PostgreSQL 18 + pgvector under MEMCAIRN_HOME.")
@_DATABASE
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=37900, show_default=True)
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="uvicorn worker processes (each loads its own copy of the embedding model).")
@click.pass_context
def server(ctx: click.Context, embedded: bool, database: str | None, host: str, port: int, workers: int) -> None:
    """The team memory server: the /v1 HTTP API over PostgreSQL, in the foreground.

    It is ready when GET /v1/health answers 200. Every other route needs a key from
    `memcairn server keys create`.

    Example:

    \b
        memcairn server --embedded --port 37900
        memcairn server --database postgresql://memcairn@db.internal/memcairn
    """
    if ctx.invoked_subcommand is not None:
        ctx.ensure_object(dict)["database"] = database  # `memcairn server --database URL keys ...` means that URL
        return
    if embedded == bool(database):
        raise click.UsageError("choose one: --embedded (bundled PostgreSQL) or --database postgresql://...")
    from memcairn.server.run import serve

    sys.exit(serve(memcairn_home(), database_url=database, host=host, port=port, workers=workers))


@server.group("keys")
def keys_group() -> None:
    """API keys: shown once at creation, stored as HMAC under the server secret in MEMCAIRN_HOME."""


def _database(given: str | None) -> str | None:
    """A keys command's own --database, else the one given to `memcairn server` before it."""
    if given:
        return given
    obj = click.get_current_context().find_object(dict)
    return obj.get("database") if obj else None


def _emit_key(made: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(made)
        return
    click.echo(made["key"])
    click.echo(f"key id {made['id']} · scopes {', '.join(made['scopes'])}"
               + (f" · project {made['project']}" if made.get("project") else "")
               + (f" · expires {made['expires_at']}" if made.get("expires_at") else "")
               + " · shown once: store it now", err=True)


@keys_group.command("create")
@click.option("--tenant", required=True, help="The team or organisation the key belongs to (made when new).")
@click.option("--scope", "scopes", default="memories:read,memories:write", show_default=True,
              help="Comma-separated: memories:read, memories:write, admin.")
@click.option("--project", help="Pin the key to this one project.")
@click.option("--expires", help="30d, 12h, 90m or an ISO date/time.")
@click.option("--label", help="A note of what the key is for.")
@click.option("--json", "as_json", is_flag=True, help="Print {\"id\", \"key\", ...} as JSON.")
@_DATABASE
def keys_create(tenant: str, scopes: str, project: str | None, expires: str | None, label: str | None,
                as_json: bool, database: str | None) -> None:
    """Create a key and print it (once).

    Example:

    \b
        memcairn server keys create --tenant acme --scope memories:read --project api --expires 90d --json
    """
    from memcairn.pgstore import db, keys
    from memcairn.pgstore.secret import load_or_create_secret
    from memcairn.server.run import owner_database

    scope_list = keys.parse_scopes(scopes)
    expires_at = keys.parse_expiry(expires)
    home = memcairn_home()
    with owner_database(home, _database(database)) as owner, db.connect(owner) as conn:
        made = keys.create_key(conn, load_or_create_secret(home), tenant, scopes=scope_list, project=project,
                               expires_at=expires_at, label=label)
    _emit_key(made, as_json)


@keys_group.command("list")
@click.option("--tenant", help="Only this tenant's keys.")
@click.option("--json", "as_json", is_flag=True)
@_DATABASE
def keys_list(tenant: str | None, as_json: bool, database: str | None) -> None:
    """Keys with their scopes, pin, status and last use (never the keys themselves).

    Example:

    \b
        memcairn server keys list --tenant acme
    """
    from memcairn.pgstore import db, keys
    from memcairn.server.run import owner_database

    with owner_database(memcairn_home(), _database(database)) as owner, db.connect(owner) as conn:
        found = keys.list_keys(conn, tenant)
    if as_json:
        emit_json(found)
        return
    for key in found:
        click.echo(f"{key['id']}  {key['tenant']:<16} {key['status']:<8} {','.join(key['scopes']):<34} "
                   f"{key['project'] or '-':<16} last used {key['last_used_at'] or 'never'}")
    if not found:
        click.echo("no keys yet: memcairn server keys create --tenant NAME", err=True)


@keys_group.command("revoke")
@click.argument("key_id")
@_DATABASE
def keys_revoke(key_id: str, database: str | None) -> None:
    """Revoke a key: it is refused (401) from the next request on.

    Example:

    \b
        memcairn server keys revoke 5f4ca7257fd7
    """
    from memcairn.pgstore import db, keys
    from memcairn.server.run import owner_database

    with owner_database(memcairn_home(), _database(database)) as owner, db.connect(owner) as conn:
        keys.revoke_key(conn, key_id)
    click.echo(f"revoked {key_id}")


@keys_group.command("rotate")
@click.argument("key_id")
@click.option("--json", "as_json", is_flag=True)
@_DATABASE
def keys_rotate(key_id: str, as_json: bool, database: str | None) -> None:
    """Replace a key by a new one with the same tenant, scopes, pin and expiry; the old one is revoked.

    Example:

    \b
        memcairn server keys rotate 5f4ca7257fd7 --json
    """
    from memcairn.pgstore import db, keys
    from memcairn.pgstore.secret import load_or_create_secret
    from memcairn.server.run import owner_database

    home = memcairn_home()
    with owner_database(home, _database(database)) as owner, db.connect(owner) as conn:
        made = keys.rotate_key(conn, load_or_create_secret(home), key_id)
    _emit_key({**made, "project": None}, as_json)
