"""``memcairn connect`` and ``disconnect``: a developer's worker in remote mode (a team server) or local mode."""

from __future__ import annotations

import click

from memcairn.cli.common import emit_json, settings
from memcairn.core.errors import ConfigError
from memcairn.wire.team_client import (
    RemoteConfig,
    TeamClient,
    TeamUnavailable,
    clear_remote,
    error_detail,
    mask_key,
    normalise_url,
    save_remote,
)

SWITCH_NOTE = "a running worker switches within a second (no restart needed); one started later reads it at start"


def _project_map(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        local, sep, remote = pair.partition("=")
        if not sep or not local.strip() or not remote.strip():
            raise ConfigError(f"--project-map takes LOCAL=SERVER (a local project and its name on the server), "
                              f"got {pair!r}")
        out[local.strip()] = remote.strip()
    return out


def check_server(url: str, key: str) -> None:
    """The server answers /v1/health and takes the key for reading and writing.

    Raises:
        ConfigError: saying what failed and what to do.
    """
    client = TeamClient(url, key, timeout=5.0)
    try:
        health = client.request("GET", "/v1/health")
        if health.status != 200 or not isinstance(health.body, dict) or health.body.get("status") != "ok":
            raise ConfigError(f"{url}/v1/health answered {health.status}: {error_detail(health)}; is this a "
                              "memcairn server, and is its database up?")
        read = client.request("GET", "/v1/projects")
        # an empty batch: the key and its scope are checked before the batch is, so 400 means "may write"
        write = client.request("POST", "/v1/events", body={"events": []}) if read.status == 200 else read
    except TeamUnavailable as exc:
        raise ConfigError(f"cannot reach the team server: {exc}") from None
    for resp, what in ((read, "read"), (write, "write")):
        if resp.status == 401:
            raise ConfigError("the server does not know this key (unknown, revoked or expired); make one with "
                              "`memcairn server keys create --tenant TEAM`")
        if resp.status == 403:
            raise ConfigError(f"this key may not {what} memories ({error_detail(resp)}); it needs the scopes "
                              "memories:read and memories:write")
    if read.status != 200 or write.status != 400:
        raise ConfigError(f"unexpected answers from the server ({read.status}, {write.status}); is it a memcairn "
                          "server of this version?")


@click.command()
@click.argument("url")
@click.option("--key", envvar="MEMCAIRN_REMOTE_KEY", required=True,
              help="An API key of the team server (or MEMCAIRN_REMOTE_KEY), with memories:read and memories:write.")
@click.option("--project-map", "mapping", multiple=True, metavar="LOCAL=SERVER",
              help="Send a local project under another name on the server (repeatable).")
@click.option("--insecure", is_flag=True,
              help="Allow plain http:// to a host other than this machine (the key and memories travel unencrypted); "
                   "kept in the link, so the worker's forwarder allows it too.")
@click.option("--json", "as_json", is_flag=True)
def connect(url: str, key: str, mapping: tuple[str, ...], insecure: bool, as_json: bool) -> None:
    """Remote mode: the local worker keeps capturing and storing as before, forwards what it stores to the team
    server (batched, retried, nothing lost while the server is down) and asks the server first for context and
    search, falling back to the local copy. The key is kept in MEMCAIRN_HOME/remote.json (owner-only) and never
    shown again.

    Example:

    \b
        memcairn connect https://memory.example.com --key mck_...
    """
    cfg = settings()
    link = RemoteConfig(normalise_url(url, insecure=insecure), key.strip(), _project_map(mapping), insecure)
    check_server(link.url, link.key)
    path = save_remote(cfg.home, link)
    out = {"mode": "remote", "url": link.url, "key": mask_key(link.key), "project_map": link.project_map,
           "insecure": link.insecure, "saved_in": str(path), "worker": SWITCH_NOTE}
    if as_json:
        emit_json(out)
        return
    click.echo(f"connected to {link.url} with key {out['key']} (saved in {path}, owner-only)")
    click.echo(SWITCH_NOTE)


@click.command()
@click.option("--json", "as_json", is_flag=True)
def disconnect(as_json: bool) -> None:
    """Local mode again: nothing more is forwarded; context and search come from the local store only. What was
    forwarded stays on the server.

    Example:

    \b
        memcairn disconnect
    """
    removed = clear_remote(settings().home)
    if as_json:
        emit_json({"mode": "local", "was_connected": removed})
        return
    click.echo("disconnected: local mode" if removed else "not connected: already in local mode")
