"""`memcairn server`: the team server in the foreground, its API keys (`memcairn server keys ...`) and its ingest
queue (`memcairn server queue ...`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from memcairn.cli.common import emit_json
from memcairn.wire.config import memcairn_home

if TYPE_CHECKING:
    import psycopg

_DATABASE = click.option("--database", metavar="URL", envvar="MEMCAIRN_SERVER_DATABASE",
                         help="postgresql://... of an existing PostgreSQL (default: the embedded one under "
                              "MEMCAIRN_HOME)")


@click.group("server", invoke_without_command=True)
@click.option("--embedded", is_flag=True, help="Run the bundled PostgreSQL 18 + pgvector under MEMCAIRN_HOME.")
@_DATABASE
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=37900, show_default=True)
@click.option("--workers", type=click.IntRange(1, 64), default=None,
              help="Server processes, each on its own socket of the port and with its own copy of the embedding "
                   "model [default: one per core, at most 4].")
@click.option("--connections", type=click.IntRange(2, 256), default=None,
              help="PostgreSQL connections per worker process [default: 4 per core, 8 to 32].")
@click.option("--tls-cert", metavar="FILE", help="Serve HTTPS with this PEM certificate (chain); needs --tls-key.")
@click.option("--tls-key", metavar="FILE", help="The certificate's unencrypted PEM private key.")
@click.pass_context
def server(ctx: click.Context, embedded: bool, database: str | None, host: str, port: int, workers: int | None,
           connections: int | None, tls_cert: str | None, tls_key: str | None) -> None:
    """The team memory server: the /v1 HTTP API over PostgreSQL, in the foreground.

    It is ready when GET /v1/health answers 200. Every other route needs a key from
    `memcairn server keys create`.

    Example:

    \b
        memcairn server --embedded --port 37900
        memcairn server --database postgresql://memcairn@db.internal/memcairn
        memcairn server --embedded --host 0.0.0.0 --tls-cert server.pem --tls-key server.key
    """
    if ctx.invoked_subcommand is not None:
        ctx.ensure_object(dict)["database"] = database  # `memcairn server --database URL keys ...` means that URL
        return
    if embedded == bool(database):
        raise click.UsageError("choose one: --embedded (bundled PostgreSQL) or --database postgresql://...")
    from memcairn.core.errors import ConfigError
    from memcairn.server.run import serve
    from memcairn.server.tls import uvicorn_ssl_options

    try:
        tls = uvicorn_ssl_options(tls_cert, tls_key)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    sys.exit(serve(memcairn_home(), database_url=database, host=host, port=port, workers=workers,
                   connections=connections, tls=tls))


@server.command("migrate")
@_DATABASE
@click.option("--app-role", metavar="NAME", help="The application role the server connects as [default: the one "
                                                 "recorded in the database, else memcairn_app_<database>].")
@click.option("--json", "as_json", is_flag=True, help='Print {"applied", "role", "password", "notes"}.')
def server_migrate(database: str | None, app_role: str | None, as_json: bool) -> None:
    """Create or upgrade the server's schema (tables, row-level security) and its application role, as the
    database's owner: no superuser needed. Run it once per install and upgrade; the server then starts with the
    application role's URL and needs no DDL rights.

    The role is the database's own (never shared with another database of the cluster). When it is new and the
    owner may create roles, it is made with a random password, shown once; otherwise an administrator creates
    it first (CREATE ROLE memcairn_app_DB LOGIN PASSWORD '...') and this only grants.

    Example:

    \b
        memcairn server migrate --database postgresql://owner@db.internal/memcairn
        memcairn server --database postgresql://memcairn_app_memcairn:PASSWORD@db.internal/memcairn
    """
    from psycopg.conninfo import make_conninfo

    from memcairn.core.errors import MemcairnError
    from memcairn.pgstore import db

    if not database:
        raise click.UsageError("say which database: --database postgresql://OWNER@HOST/DB (--embedded migrates "
                               "at start)")
    try:
        done = db.setup(database, app_role=app_role)
    except MemcairnError as exc:
        raise click.ClickException(str(exc)) from None
    app_url = make_conninfo(database, user=done.role, password=done.password or "PASSWORD")
    if as_json:
        emit_json({"applied": done.applied, "role": done.role, "password": done.password, "notes": done.notes})
        return
    applied = f"applied {', '.join(map(str, done.applied))}" if done.applied else "nothing to apply"
    click.echo(f"schema current ({applied}); application role {done.role}")
    if done.password:
        click.echo(f"start the server with (the password is shown once: store it now):\n  memcairn server "
                   f"--database '{app_url}'")
    for note in done.notes:
        click.echo(f"an administrator must run: {note}", err=True)


@server.group("keys")
def keys_group() -> None:
    """API keys: shown once at creation, stored as HMAC under the server secret in MEMCAIRN_HOME."""


@contextmanager
def _owner_connection(given: str | None) -> Iterator[psycopg.Connection]:
    """A connection as the owner of the server's database (``--database``, else the embedded one, started for
    the command when no server runs): what the keys and queue commands work through."""
    from memcairn.pgstore import db
    from memcairn.server.run import owner_database

    with owner_database(memcairn_home(), _database(given)) as owner, db.connect(owner) as conn:
        yield conn


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
    from memcairn.pgstore import keys
    from memcairn.pgstore.secret import load_or_create_secret

    scope_list = keys.parse_scopes(scopes)
    expires_at = keys.parse_expiry(expires)
    home = memcairn_home()
    with _owner_connection(database) as conn:
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
    from memcairn.pgstore import keys

    with _owner_connection(database) as conn:
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
    from memcairn.pgstore import keys

    with _owner_connection(database) as conn:
        keys.revoke_key(conn, key_id)
    click.echo(f"revoked {key_id}")


@keys_group.command("rotate")
@click.argument("key_id")
@click.option("--grace", default="0", show_default=True,
              help="How long the old key keeps working beside the new one (90m, 24h, 7d; at most 30d); 0 revokes "
                   "it at once.")
@click.option("--json", "as_json", is_flag=True)
@_DATABASE
def keys_rotate(key_id: str, grace: str, as_json: bool, database: str | None) -> None:
    """Replace a key by a new one with the same tenant, scopes, pin and expiry. The old one is revoked, or with
    --grace keeps working until the overlap ends (then it expires), so clients can move over without an outage.

    Example:

    \b
        memcairn server keys rotate 5f4ca7257fd7 --grace 24h --json
    """
    from memcairn.pgstore import keys
    from memcairn.pgstore.secret import load_or_create_secret

    overlap = keys.parse_grace(grace)
    home = memcairn_home()
    with _owner_connection(database) as conn:
        made = keys.rotate_key(conn, load_or_create_secret(home), key_id, grace=overlap)
    _emit_key({**made, "project": None}, as_json)
    if not as_json:
        until = made.get("replaced_works_until")
        click.echo(f"key {key_id} " + (f"keeps working until {until}" if until else "is revoked"), err=True)


@server.group("queue")
def queue_group() -> None:
    """The ingest queue of POST /v1/events: what waits, what failed and why; failed events retried or purged.

    A queued event that could not be stored is kept as a failed job with its error, and not tried again until
    `memcairn server queue retry` says so (after fixing the cause). These commands show counts, times and
    errors, never the events' content.
    """


_TENANT = click.option("--tenant", help="Only this tenant's jobs.")
_IDS = click.option("--id", "ids", type=click.IntRange(min=1), multiple=True, metavar="QUEUE_ID",
                    help="Only this failed job (repeatable); its queue id as `queue status` lists it.")


@queue_group.command("status")
@_TENANT
@click.option("--limit", type=click.IntRange(min=0), default=100, show_default=True,
              help="Failed jobs listed at most (the counts cover all).")
@click.option("--json", "as_json", is_flag=True, help='Print {"tenants": [...], "failed": [...]}.')
@_DATABASE
def queue_status(tenant: str | None, limit: int, as_json: bool, database: str | None) -> None:
    """Jobs waiting and failed per tenant, the oldest waiting one's age, and each failed job's id, tenant, time
    and error.

    Example:

    \b
        memcairn server queue status --tenant acme
    """
    from memcairn.pgstore import ingest_admin
    from memcairn.wire.fence import clean_line

    with _owner_connection(database) as conn:
        found = ingest_admin.status(conn, tenant, limit=limit)
    if as_json:
        emit_json(found.as_dict())
        return
    if not found.tenants:
        click.echo("the ingest queue is empty")
        return
    click.echo(f"{'tenant':<20} {'waiting':>8} {'oldest waiting':>15} {'failed':>7}")
    for t in found.tenants:
        click.echo(f"{clean_line(t.tenant, 20):<20} {t.waiting:>8} {t.oldest_waiting_seconds:>13.1f} s "
                   f"{t.failed:>7}")
    failed = sum(t.failed for t in found.tenants)
    if failed:
        shown = "" if failed <= len(found.failed) else f" (the first {len(found.failed)} of {failed})"
        click.echo(f"\nfailed jobs{shown}:")
        for job in found.failed:
            click.echo(f"  {job.id:>8}  {clean_line(job.tenant, 20):<20} {job.failed_at.isoformat(timespec='seconds')}"
                       f"  {clean_line(job.error, 200)}")
        click.echo("retry after fixing the cause: memcairn server queue retry [--tenant NAME] [--id QUEUE_ID]",
                   err=True)


@queue_group.command("retry")
@_TENANT
@_IDS
@click.option("--json", "as_json", is_flag=True, help='Print {"retried": [queue ids]}.')
@_DATABASE
def queue_retry(tenant: str | None, ids: tuple[int, ...], as_json: bool, database: str | None) -> None:
    """Make failed jobs wait again (all failed jobs when none is named): the running server's consumers take
    them at their next poll. One that fails again is marked failed again.

    Example:

    \b
        memcairn server queue retry --tenant acme --id 812 --id 813
    """
    from memcairn.pgstore import ingest_admin

    with _owner_connection(database) as conn:
        retried = ingest_admin.retry(conn, tenant, ids)
    if as_json:
        emit_json({"retried": retried})
    else:
        click.echo(f"retried {len(retried)} failed job{'' if len(retried) == 1 else 's'}")


@queue_group.command("purge")
@click.option("--failed", is_flag=True, help="Purge failed jobs (the only kind that can be purged).")
@_TENANT
@_IDS
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help='Print {"purged": [queue ids]}.')
@_DATABASE
def queue_purge(failed: bool, tenant: str | None, ids: tuple[int, ...], yes: bool, as_json: bool,
                database: str | None) -> None:
    """Delete failed jobs and their events for good (all failed jobs when none is named), each recorded in the
    audit log (ingest.purge, actor cli). Asks first unless --yes. A client retrying the request that queued one
    is still answered with its first ids (Idempotency-Key) and the event is not queued again.

    Example:

    \b
        memcairn server queue purge --failed --tenant acme --id 812 --yes
    """
    from memcairn.pgstore import ingest_admin

    if not failed:
        raise click.UsageError("only failed jobs can be purged: say --failed (waiting ones are stored by the "
                               "server's consumers)")
    with _owner_connection(database) as conn:
        if not yes:  # nothing is asked when nothing has failed (the purge below then changes nothing)
            count = len(ids) or sum(t.failed for t in ingest_admin.status(conn, tenant, limit=0).tenants)
            which = (f"failed job{'' if len(ids) == 1 else 's'} {', '.join(map(str, ids))}" if ids
                     else f"{count} failed job{'' if count == 1 else 's'}")
            if count:
                events = "its event" if count == 1 else "their events"
                click.confirm(f"Delete {which}{f' of tenant {tenant!r}' if tenant else ''} and {events} for good?",
                              abort=True, err=True)
        purged = ingest_admin.purge(conn, tenant, ids)
    if as_json:
        emit_json({"purged": purged})
    else:
        click.echo(f"purged {len(purged)} failed job{'' if len(purged) == 1 else 's'}")
