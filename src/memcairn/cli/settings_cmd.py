"""``memcairn settings``: every setting, its current value, where that value came from, and what it does."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import click

from memcairn.cli.common import emit_json
from memcairn.settings_source import SETTINGS, read_values

HOME_HELP = "Where the database, the semantic mirror, the logs and settings.json live (environment only)."


def settings_rows() -> list[dict[str, Any]]:
    """One row per setting (``home`` first): name, value, where it came from, its variable and its help. A
    token's value is never shown, only whether one is set."""
    origins: dict[str, str] = {}
    values = read_values(origins=origins)
    rows = [{"name": "home", "value": values["home"], "from": origins["home"], "variable": "MEMCAIRN_HOME",
             "help": HOME_HELP}]
    for setting in SETTINGS:
        value = values[setting.name]
        if setting.name == "token" and value:
            value = "(set, not shown)"
        rows.append({"name": setting.name, "value": value, "from": origins[setting.name],
                     "variable": f"MEMCAIRN_{setting.name.upper()}", "help": setting.help})
    return rows


@click.command("settings")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {name, value, from, variable, help}.")
def settings_cmd(as_json: bool) -> None:
    """Every setting: its value now, where that came from (a MEMCAIRN_<NAME> variable, settings.json in
    MEMCAIRN_HOME, or the default) and what it does.

    Example:

    \b
        MEMCAIRN_PORT=38000 memcairn settings
    """
    rows = settings_rows()
    if as_json:
        emit_json(rows)
        return
    for row in rows:
        where = f"default; {row['variable']}" if row["from"] == "default" else f"from {row['from']}"
        click.echo(f"{row['name']} = {json.dumps(row['value'], ensure_ascii=False)}  ({where})")
        click.echo(textwrap.indent(textwrap.fill(row["help"], 96), "    "))
