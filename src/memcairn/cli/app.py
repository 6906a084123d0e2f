"""The command line: a click group whose commands translate arguments and errors, nothing more."""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

import click

from memcairn import __version__
from memcairn.cli.common import run_guarded
from memcairn.cli.correct_cmd import correct
from memcairn.cli.demo_cmd import demo
from memcairn.cli.freshness_cmds import projects, stale
from memcairn.cli.hook_cmd import hook
from memcairn.cli.integration_cmds import install, mcp, uninstall
from memcairn.cli.remote_cmds import connect, disconnect
from memcairn.cli.search_cmds import search, timeline
from memcairn.cli.server_cmds import server
from memcairn.cli.settings_cmd import settings_cmd
from memcairn.cli.store_cmds import add, db, doctor, forget, show, stats
from memcairn.cli.sync_cmds import sync
from memcairn.cli.transfer_cmds import export, import_group
from memcairn.cli.worker_cmds import worker


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="memcairn")
def cli() -> None:
    """memcairn: persistent, searchable memory for coding agents.

    Data lives under MEMCAIRN_HOME (default ~/.memcairn). Every setting can also come from a
    MEMCAIRN_<NAME> environment variable; `memcairn settings` lists them with their values.

    Example:

    \b
        memcairn add --project demo --kind manual --title "Use WAL" --text "SQLite runs in WAL mode"
    """


for command in (add, search, timeline, show, forget, correct, stats, doctor, db, demo, sync, worker, mcp, install,
                uninstall, import_group, export, settings_cmd, hook, server, connect, disconnect, stale, projects):
    cli.add_command(command)
for point in entry_points(group="memcairn.commands"):  # `memcairn bench`: nothing imports bench/
    point.load()(cli)


def run(args: list[str]) -> int:
    return run_guarded(cli, args)


def main() -> None:
    sys.exit(run(sys.argv[1:]))
