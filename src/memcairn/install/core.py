"""Install and uninstall memcairn's hooks and MCP server for one agent.

Every file is planned first (read, parse, change in memory) and written only when every plan succeeded,
so a malformed file stops the install before anything is written. A file whose planned text equals its
current text is not touched (installing twice changes nothing). Each written file is backed up first.

Where things go (``HOME`` is honoured through ``Path.home()``):

- claude-code: hooks in ``$CLAUDE_CONFIG_DIR/settings.json`` (default ``~/.claude/settings.json``); the
  MCP server at user scope, top-level ``mcpServers`` of ``~/.claude.json`` (``$CLAUDE_CONFIG_DIR/.claude.json``
  when that variable is set, where Claude Code keeps it then).
- codex: ``mcp_servers.memcairn`` in ``$CODEX_HOME/config.toml`` (a delimited block, see ``tomlblock``; it names
  memcairn's variables in ``env_vars`` and is ``required``) and hooks in ``$CODEX_HOME/hooks.json`` (default
  ``~/.codex``).
- gemini: ``mcpServers.memcairn``, hooks and memcairn's variables in
  ``security.environmentVariableRedaction.allowed`` in ``~/.gemini/settings.json``.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memcairn.core.errors import ConfigError
from memcairn.install import jsonedit, jsontext, tomlblock
from memcairn.install.files import (
    BACKUP_INFIX,
    InstallState,
    backup,
    check_writable,
    read_text,
    remove_file,
    sha256,
    unified_diff,
    write_text,
)
from memcairn.install.specs import (
    AGENTS,
    CLAUDE_CODE,
    CODEX,
    GEMINI,
    AgentSpec,
    check_executable,
    hook_group,
    hook_interpreter,
    mcp_command,
    setting_variables,
)

PLATFORMS = tuple(AGENTS)
# Gemini CLI in CI (GITHUB_SHA set) strips unknown variables from hooks and MCP servers unless listed here.
ALLOWED_PATH = ("security", "environmentVariableRedaction", "allowed")
RETRIES = 3


@dataclass(frozen=True)
class Target:
    """One file an agent reads: JSON with our hooks and/or MCP server, or TOML with our server block."""

    path: Path
    format: str  # "json" or "toml"
    hooks: dict[str, dict[str, Any]] | None = None  # event -> our group
    server: dict[str, Any] | None = None  # our mcpServers entry (json)
    block: str | None = None  # our TOML block
    allowed: list[str] | None = None  # names for Gemini CLI's list of variables it must not redact


@dataclass
class Change:
    path: Path
    before: str | None
    after: str | None  # None: the file is removed
    record: dict[str, Any] | None  # the state record once written (None: forget the file)
    backup: Path | None = None

    @property
    def changed(self) -> bool:
        return self.before != self.after


@dataclass
class Report:
    platform: str
    action: str  # "install" or "uninstall"
    dry_run: bool
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    removed_backups: list[Path] = field(default_factory=list)  # an uninstall's: every backup of its files

    @property
    def changed(self) -> bool:
        return any(c.changed for c in self.changes)

    def diff(self) -> str:
        return "".join(unified_diff(c.path, c.before, c.after) for c in self.changes if c.changed)


# -- where the files are ----------------------------------------------------------------------------
def claude_dir() -> Path:
    configured = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".claude"


def claude_json() -> Path:
    configured = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(configured).expanduser() if configured else Path.home()) / ".claude.json"


def codex_home() -> Path:
    configured = os.environ.get("CODEX_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".codex"


def gemini_settings() -> Path:
    return Path.home() / ".gemini" / "settings.json"


def hook_groups(executable: str, agent: AgentSpec, interpreter: str | None) -> dict[str, dict[str, Any]]:
    return {spec.event: hook_group(executable, agent, spec, interpreter) for spec in agent.hooks}


def targets(platform: str, executable: str) -> list[Target]:
    """The files ``platform`` reads and what memcairn puts in each."""
    interpreter = hook_interpreter(executable)  # the short commands when the script's Python runs them itself
    if platform == CLAUDE_CODE.platform:
        command, args = mcp_command(executable, CLAUDE_CODE, interpreter)
        return [
            Target(claude_dir() / "settings.json", "json", hooks=hook_groups(executable, CLAUDE_CODE, interpreter)),
            Target(claude_json(), "json", server={"type": "stdio", "command": command, "args": args}),
        ]
    if platform == CODEX.platform:
        command, args = mcp_command(executable, CODEX, interpreter)
        return [
            Target(codex_home() / "config.toml", "toml",
                   block=tomlblock.server_block(command, setting_variables(), args)),
            Target(codex_home() / "hooks.json", "json", hooks=hook_groups(executable, CODEX, interpreter)),
        ]
    if platform == GEMINI.platform:
        command, args = mcp_command(executable, GEMINI, interpreter)
        return [Target(gemini_settings(), "json", hooks=hook_groups(executable, GEMINI, interpreter),
                       server={"command": command, "args": args}, allowed=setting_variables())]
    raise ConfigError(f"unknown agent {platform!r}; use one of {', '.join(PLATFORMS)}")


# -- planning ---------------------------------------------------------------------------------------
def _plan_install(target: Target, before: str | None, record: dict[str, Any] | None) -> Change:
    where = str(target.path)
    if target.format == "toml":
        fresh = tomlblock.find_block(before or "") is None
        after, separator = tomlblock.add_block(before, target.block or "", where,
                                               None if fresh or record is None else record.get("separator"))
        if fresh or record is None:
            record = {"existed": before is not None, "sha256": sha256(before) if before is not None else None}
        record = {**record, "separator": separator}
        return Change(target.path, before, after, record)

    try:
        doc = jsonedit.parse_object(before, where)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; memcairn's entries to add by hand:\n{_entries_by_hand(target)}") from None
    new, created, previous = doc, [], None
    if target.hooks is not None:
        new, made = jsonedit.apply_hooks(new, target.hooks, where)
        created += made
    if target.server is not None:
        new, made, previous = jsonedit.apply_server(new, target.server, where)
        created += made
    allowed: list[str] = []
    if target.allowed is not None:
        new, made, allowed = jsonedit.add_to_list(new, ALLOWED_PATH, target.allowed, where)
        created += made
    if new == doc:
        return Change(target.path, before, before, record)
    after = _json_text(before, doc, new)
    ours_present = jsonedit.has_our_hooks(doc) or (target.server is not None and previous is not None)
    if record is None or not ours_present:
        # A first install (or our entries were removed by hand since: the old record is stale), unless our
        # entries are there without a record (it was lost). An entry named memcairn that memcairn did not
        # write (registered by hand) is given back on uninstall.
        first = not jsonedit.has_our_hooks(doc) and (previous is None or previous != target.server)
        record = {"existed": before is not None, "sha256": sha256(before) if before is not None else None,
                  "created": [list(p) for p in created] if first else [],
                  "previous_server": previous if first else None, "allowed": allowed}
    else:
        record = {**record, "created": record.get("created", []) + [list(p) for p in created],
                  "allowed": record.get("allowed", []) + allowed}
    return Change(target.path, before, after, record)


def _entries_by_hand(target: Target) -> str:
    """What an install would add to ``target``, as JSON a person can merge into the file."""
    entries: dict[str, Any] = {}
    if target.hooks is not None:
        entries["hooks"] = target.hooks
    if target.server is not None:
        entries["mcpServers"] = {"memcairn": target.server}
    if target.allowed is not None:
        entries[".".join(ALLOWED_PATH)] = target.allowed
    return json.dumps(entries, indent=2)


def _json_text(before: str | None, doc: dict[str, Any], new: dict[str, Any]) -> str:
    """``new`` as the file's text: only the values memcairn changed are written anew, in the file's style; every
    other byte of ``before`` stays."""
    if before is None or not before.strip():
        return (jsonedit.detect_style(before) if before else jsonedit.DEFAULT_STYLE).dump(new)
    return jsontext.rewrite(before, doc, new, jsonedit.detect_style(before))


def _default_prunable(target: Target) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    if target.hooks is not None:
        paths += [("hooks",), *(("hooks", event) for event in target.hooks)]
    if target.server is not None:
        paths.append(("mcpServers",))
    if target.allowed is not None:
        paths += [ALLOWED_PATH[:n] for n in range(1, len(ALLOWED_PATH) + 1)]
    return paths


def _plan_uninstall(target: Target, before: str | None, record: dict[str, Any] | None) -> Change:
    if before is None:
        return Change(target.path, None, None, None)
    if target.format == "toml":
        after: str | None = tomlblock.remove_block(before, record.get("separator") if record else None)
        if after == before:
            return Change(target.path, before, before, None)
        tomlblock.parse(after or "", str(target.path))
        if record and not record.get("existed") and not (after or "").strip():
            after = None
        return Change(target.path, before, after, None)

    doc = jsonedit.parse_object(before, str(target.path))
    new = jsonedit.remove_hooks(doc) if target.hooks is not None else doc
    if target.server is not None:
        new = jsonedit.remove_server(new, record.get("previous_server") if record else None)
    if target.allowed is not None:  # only the names memcairn added (without a record: all of memcairn's)
        new = jsonedit.remove_from_list(new, ALLOWED_PATH, record.get("allowed", []) if record else target.allowed)
    if new == doc:
        return Change(target.path, before, before, None)
    prunable = [tuple(p) for p in record.get("created", [])] if record else _default_prunable(target)
    new = jsonedit.prune(new, prunable)
    after = _json_text(before, doc, new)
    if jsonedit.parse_object(after, str(target.path)) != new:  # no backup is taken: the result must be exact
        raise ConfigError(f"could not remove memcairn's entries from {target.path} without changing others; "
                          "remove them by hand (nothing was changed)")
    if record and not record.get("existed") and new == {}:
        return Change(target.path, before, None, None)
    original = _original_text(target.path, record)
    if original is not None and jsonedit.parse_object(original, str(target.path)) == new:
        after = original  # nothing else changed since the install: give back the very bytes
    return Change(target.path, before, after, None)


def _original_text(path: Path, record: dict[str, Any] | None) -> str | None:
    """The file as it was before the first install, read from its backup when the hash still matches."""
    if not record or not record.get("backup") or not record.get("sha256"):
        return None
    text = read_text(Path(record["backup"]))
    return text if text is not None and sha256(text) == record["sha256"] else None


# -- applying ---------------------------------------------------------------------------------------
class _ChangedMeanwhile(Exception):
    pass


def _restores(change: Change, old: dict[str, Any]) -> bool:
    """Whether an uninstall gives the file back as it was before the first install: the very bytes, or no file
    where there was none. Its backups (and a folder the install made) are then of no further use."""
    if change.record is not None or not old:
        return False
    if change.after is None:
        return not old.get("existed")
    return bool(old.get("sha256")) and sha256(change.after) == old["sha256"]


def _missing_dirs(path: Path) -> list[str]:
    """The folders a write of ``path`` will create, deepest first."""
    missing, folder = [], Path(os.path.realpath(path)).parent
    while not folder.exists() and folder != folder.parent:
        missing.append(str(folder))
        folder = folder.parent
    return missing


def _apply(change: Change, state: InstallState, leftovers: list[str]) -> None:
    """Write one change (after a backup, unless it restores the original) and record it; the folders an
    uninstall may remove once every file is written go to ``leftovers``."""
    if read_text(change.path) != change.before:
        raise _ChangedMeanwhile(str(change.path))
    old = state.get(change.path) or {}
    restores = _restores(change, old)
    uninstalling = change.record is None  # only an uninstall forgets a file's record
    if change.before is not None and not restores and not uninstalling:
        change.backup = backup(change.path)
    made = [] if change.after is None else _missing_dirs(change.path)
    if change.after is None:
        remove_file(change.path)
    else:
        write_text(change.path, change.after)
    if restores:  # its backups go after the whole uninstall (_remove_backups)
        leftovers.extend(old.get("dirs", []))
    record = change.record
    if record is not None:
        record = {**record, "backups": [*old.get("backups", []), *([str(change.backup)] if change.backup else [])],
                  "dirs": [*old.get("dirs", []), *made]}
        if "backup" not in record:
            record["backup"] = str(change.backup) if change.backup else None
    state.put(change.path, record)


def _remove_backups(report: Report, state: InstallState) -> None:
    """After an uninstall, every ``<file>.memcairn-bak-*`` of the files it handled that memcairn no longer has
    entries in: also those of earlier cycles, and those an install recorded in another home's state."""
    for change in report.changes:
        if state.get(change.path) is not None:
            continue
        pattern = glob.escape(change.path.name) + BACKUP_INFIX + "*"
        for found in sorted(change.path.parent.glob(pattern)):
            try:
                found.unlink()
            except OSError:
                continue  # left in place; the person can remove it
            report.removed_backups.append(found)


def _remove_empty(folders: list[str]) -> None:
    for folder in sorted(set(folders), key=len, reverse=True):
        try:
            os.rmdir(folder)
        except OSError:
            pass  # not empty (the person keeps other files there) or already gone


def _run(platform: str, action: str, executable: str, dry_run: bool,
         plan: Callable[[Target, str | None, dict[str, Any] | None], Change]) -> Report:
    for _ in range(RETRIES):
        state = InstallState()
        report = Report(platform, action, dry_run)
        for target in targets(platform, executable):
            report.changes.append(plan(target, read_text(target.path), state.get(target.path)))
        if dry_run or not report.changed:
            if action == "uninstall" and not dry_run:
                _remove_backups(report, state)
            return report
        for change in report.changes:
            if change.changed:
                check_writable(change.path)
        check_writable(state.path)  # without the record, uninstall cannot give back the original bytes
        leftovers: list[str] = []
        try:
            for change in report.changes:
                if change.changed:
                    _apply(change, state, leftovers)
        except _ChangedMeanwhile:
            state.save()
            continue  # the agent rewrote a file while we worked: plan again from what is there now
        except OSError as exc:
            state.save()
            done = [str(c.path) for c in report.changes if c.changed and str(c.path) in state.files]
            raise ConfigError(f"cannot write {exc.filename or 'a settings file'}: {exc.strerror or exc}"
                              + (f" (already changed: {', '.join(done)})" if done else "")) from None
        state.save()
        if action == "uninstall":
            _remove_backups(report, state)
        _remove_empty(leftovers)
        return report
    raise ConfigError(f"the {platform} settings kept changing while memcairn was writing them; close the agent "
                      "and run the command again")


def registered_hooks() -> dict[str, str]:
    """The agents whose settings hold memcairn's hooks now: their platform name (as hooks send it) -> the file."""
    from memcairn.wire.protocol import PLATFORM_ALIASES, platform_key

    found: dict[str, str] = {}
    for platform in PLATFORMS:
        for target in targets(platform, "memcairn"):
            if target.hooks is None or target.format != "json":
                continue
            try:
                doc = jsonedit.parse_object(read_text(target.path), str(target.path))
            except ConfigError:
                continue
            if jsonedit.has_our_hooks(doc):
                found[PLATFORM_ALIASES.get(platform_key(platform), platform)] = str(target.path)
    return found


def install(platform: str, executable: str, *, dry_run: bool = False) -> Report:
    """Register memcairn's hooks and MCP server for ``platform``; see the module docstring.

    Raises:
        ConfigError: an unknown platform, or a file that cannot be parsed or safely changed (nothing is
            written then).
    """
    check_executable(executable)
    report = _run(platform, "install", executable, dry_run, _plan_install)
    if platform == CODEX.platform:
        report.notes.append("Codex runs a new or changed hook only after you trust it: open /hooks in Codex and "
                            "trust the memcairn hooks (`codex exec` silently skips untrusted hooks until then). "
                            "(Codex older than 0.124 also needs `[features] codex_hooks = true` in config.toml.)")
    if platform == GEMINI.platform and os.environ.get("MEMCAIRN_TOKEN"):
        report.notes.append("Gemini CLI removes variables whose name holds TOKEN from an MCP server's environment: "
                            "keep the token in settings.json instead (`memcairn settings set token <token>`), "
                            "where the hooks and the MCP server read it too.")
    return report


def uninstall(platform: str, *, dry_run: bool = False) -> Report:
    """Remove exactly what ``install`` added for ``platform`` (giving back the original bytes when
    nothing else changed since).

    Raises:
        ConfigError: an unknown platform, or a file that cannot be parsed (nothing is written then).
    """
    return _run(platform, "uninstall", "memcairn", dry_run, _plan_uninstall)
