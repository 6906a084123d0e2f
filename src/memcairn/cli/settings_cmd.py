"""``memcairn settings``: every setting, its current value, where that value came from, and what it does;
``settings set`` and ``settings unset`` change ``$MEMCAIRN_HOME/settings.json``."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import click

from memcairn.cli.common import emit_json
from memcairn.core.errors import ConfigError
from memcairn.wire.config import private_home
from memcairn.wire.settings_source import BY_NAME, SETTINGS, SETTINGS_FILE, coerce, memcairn_home, read_values

HOME_HELP = "Where the database, the semantic mirror, the logs and settings.json live (environment only)."
REMOTE_HELP = ("The team server this worker forwards to and asks first (`memcairn connect`/`disconnect`): the key "
               "masked, the forwarder's state, memories waiting, the last sync (epoch ms) and error.")
# Settings whose value is one of a few names; a typo there would only show when the worker next starts.
CHOICES = {"vector_backend": ("sqlite-vec", "chroma", "memory", "none"),
           "capture_backend": ("offline", "anthropic", "claude-cli", "openai")}


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


@click.group("settings", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {name, value, from, variable, help}.")
@click.pass_context
def settings_cmd(ctx: click.Context, as_json: bool) -> None:
    """Every setting: its value now, where that came from (a MEMCAIRN_<NAME> variable, settings.json in
    MEMCAIRN_HOME, or the default) and what it does. `settings set` and `settings unset` change settings.json.

    Example:

    \b
        MEMCAIRN_PORT=38000 memcairn settings
    """
    if ctx.invoked_subcommand is not None:
        return
    from memcairn.wire.team_client import REMOTE_FILE, describe

    rows = settings_rows()
    remote = describe(Path(memcairn_home()))
    if as_json:  # connected: one more row, the link (key masked) and the forwarder's last state
        emit_json(rows if remote["mode"] == "local" else [*rows, {
            "name": "remote", "value": remote, "from": os.path.join(memcairn_home(), REMOTE_FILE), "variable": None,
            "help": REMOTE_HELP}])
        return
    for row in rows:
        where = f"default; {row['variable']}" if row["from"] == "default" else f"from {row['from']}"
        click.echo(f"{row['name']} = {json.dumps(row['value'], ensure_ascii=False)}  ({where})")
        click.echo(textwrap.indent(textwrap.fill(row["help"], 96), "    "))
    if remote["mode"] == "local":
        click.echo("remote = local mode (not connected to a team server; `memcairn connect URL --key KEY`)")
    else:
        click.echo(f"remote = {json.dumps(remote, ensure_ascii=False)}")
        click.echo(textwrap.indent(textwrap.fill(REMOTE_HELP, 96), "    "))


def settings_file() -> tuple[str, dict[str, Any]]:
    """The path of ``settings.json`` and what it holds (nothing when it does not exist)."""
    path = os.path.join(memcairn_home(), SETTINGS_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.loads(fh.read())
    except FileNotFoundError:
        return path, {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; fix or delete the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object of settings; fix or delete the file")
    return path, data


def write_settings_file(path: str, data: dict[str, Any]) -> None:
    """Write ``data`` as ``settings.json`` (removed when empty; owner-only)."""
    from memcairn.install.files import write_text

    if not data:
        Path(path).unlink(missing_ok=True)
        return
    private_home(Path(path).parent, create=True)  # 0700 first: no one else sees the file before the chmod
    write_text(Path(path), json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.chmod(path, 0o600)  # readable by its owner only, as every file of the home (it may hold the token)


def _known(name: str) -> str:
    if name not in BY_NAME:
        raise ConfigError(f"unknown setting {name!r}; `memcairn settings` lists them (home is set by MEMCAIRN_HOME)")
    return name


def _overridden(name: str) -> None:
    variable = f"MEMCAIRN_{name.upper()}"
    if os.environ.get(variable):
        click.echo(f"note: {variable} is set in this environment and wins over settings.json", err=True)


@settings_cmd.command("set", context_settings={"ignore_unknown_options": True})  # a value may be -5
@click.argument("name")
@click.argument("value")
def set_cmd(name: str, value: str) -> None:
    """Set NAME to VALUE in MEMCAIRN_HOME/settings.json, checked as the setting's type first (a whole number,
    true/false, one of its names). A running worker reads it when restarted (`memcairn worker restart`).

    Example:

    \b
        memcairn settings set context_token_budget 3000
    """
    setting = BY_NAME[_known(name)]
    path, data = settings_file()
    typed = coerce(name, value, setting.default, f"memcairn settings set {name}")
    allowed = CHOICES.get(name)
    if allowed and typed not in allowed:
        raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    if name == "capture_backend" and typed == "openai" and not read_values()["llm_base_url"]:
        raise ConfigError("capture_backend openai needs the API's address first: memcairn settings set llm_base_url "
                          "http://localhost:11434/v1 (your server's URL); nothing was changed")
    data[name] = typed
    write_settings_file(path, data)
    shown = "(set, not shown)" if name == "token" else json.dumps(typed, ensure_ascii=False)
    click.echo(f"{name} = {shown}  (in {path})")
    _overridden(name)


@settings_cmd.command("unset")
@click.argument("name")
def unset_cmd(name: str) -> None:
    """Remove NAME from MEMCAIRN_HOME/settings.json: its default (or its MEMCAIRN_<NAME> variable) applies again.

    Example:

    \b
        memcairn settings unset context_token_budget
    """
    setting = BY_NAME[_known(name)]
    path, data = settings_file()
    if name not in data:
        click.echo(f"{name} is not in {path}; nothing to do")
        return
    del data[name]
    write_settings_file(path, data)
    click.echo(f"{name} removed from {path}; default {json.dumps(setting.default, ensure_ascii=False)}")
    _overridden(name)
