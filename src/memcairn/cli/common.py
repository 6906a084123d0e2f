"""Shared pieces of the CLI: settings, opening the store, JSON output, error translation."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from typing import TYPE_CHECKING, Any

import click

from memcairn.core.errors import MemcairnError, NotFoundError
from memcairn.wire.config import Settings, load_settings, private_home

if TYPE_CHECKING:
    from memcairn.store.protocols import LocalStore

EXIT_USER_ERROR = 2


def settings() -> Settings:
    """The settings of a command that works on the home: the files it creates there are owner-only
    (``config.private_home``; the home is not made here: a command that only looks creates nothing)."""
    cfg = load_settings()
    private_home(cfg.home, create=False)
    return cfg


def open_store(cfg: Settings | None = None) -> LocalStore:
    """This machine's store, seen through the storage protocols (the SQLite import stays lazy)."""
    from memcairn.store import Store

    cfg = cfg or settings()
    return Store(cfg.db_path)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 transcript file``, ``2 transcript files``, ``1 summary``, ``3 summaries`` (``nouns`` when not noun+s)."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, indent=2, default=str))


def _database_error(exc: sqlite3.DatabaseError) -> str:
    from memcairn.store.db import describe_open_error

    try:
        path = str(load_settings().db_path)
    except MemcairnError:
        path = "the database"
    return describe_open_error(path, exc)


def run_guarded(group: click.Group, args: list[str]) -> int:
    """Run the CLI; a MemcairnError or an SQLite error becomes one line on stderr and exit code 2, never a
    traceback."""
    umask = os.umask(0o022)  # read it: a command may tighten it (``settings``), not an in-process caller's
    os.umask(umask)
    try:
        rv = group.main(args=args, prog_name="memcairn", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 1
    except NotFoundError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_USER_ERROR
    except MemcairnError as exc:
        click.echo(f"error: {exc}", err=True)
        return EXIT_USER_ERROR
    except sqlite3.DatabaseError as exc:  # a page damaged or locked while the command ran
        click.echo(f"error: {_database_error(exc)}; `memcairn doctor` checks the file", err=True)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 1
    finally:
        os.umask(umask)
    return rv if isinstance(rv, int) else 0
