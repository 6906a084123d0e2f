"""One tool call digested per tool family (read, search, edit, write, patch, shell...): files, hints, outcome."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memcairn.capture.offline.edits import EditChange, change
from memcairn.capture.offline.outcomes import _Outcome, _outcome, _response_text
from memcairn.capture.offline.patches import _parse_patch, _PatchFile, patch_text
from memcairn.capture.offline.paths import _is_abs, _Paths, outermost, workdirs
from memcairn.capture.offline.shell import _check_key, _script_effects, _shell_command, _ShellEffects
from memcairn.capture.offline.text import DESCRIPTION_MAX, LIST_MAX, _clip, _code, _lines, _listing, _unique
from memcairn.capture.records import ToolCall, Turn
from memcairn.wire.protocol import own_tool

_READ_TOOLS = frozenset({"read", "notebookread", "read_file", "read_many_files"})
_SEARCH_TOOLS = frozenset({
    "grep", "glob", "ls", "list_directory", "search_file_content", "websearch", "webfetch", "web_fetch",
    "google_web_search",
})
_EDIT_TOOLS = frozenset({"edit", "multiedit", "notebookedit", "replace", "str_replace_editor"})
_WRITE_TOOLS = frozenset({"write", "write_file", "create_file"})
_SHELL_TOOLS = frozenset({"bash", "shell", "exec_command", "run_shell_command", "local_shell", "shell_command"})
_TASK_TOOLS = frozenset({"task", "agent"})
_SKIP_TOOLS = frozenset({
    "todowrite", "todoread", "askuserquestion", "update_plan", "write_todos", "enterplanmode", "killshell",
    "killbash", "exitplanmode",
    # they load the agent's own instructions: neither their text nor their failure (a skill's `!` command that
    # cannot run here) says anything of the project
    "skill", "slashcommand",
})


_PURPOSE = "purpose: "  # what the agent meant a command to do, not what it taught
_NEW_TEXT = "new text: "  # the telling lines an edit added (``edits.gist``)


@dataclass
class _Action:
    """One tool call, digested: its family, files, change hints and outcome."""

    index: int
    call: ToolCall
    family: str  # read, search, edit, write, patch, shell, task, plan, other, skip
    outcome: _Outcome
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    created: bool = False
    moves_only: bool = False
    deletes_only: bool = False
    hints: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    command: str | None = None
    shown: str = ""  # the command as displayed: heredoc bodies folded, the project directory dropped
    key: str = ""  # the command normalised for "same command" matching
    runner: str | None = None
    read_only_shell: bool = False
    label: str = ""
    description: str = ""  # the agent's own sentence for a shell call (``tool_input.description``)
    detailed: bool = True  # in the batch being observed; context calls skip what only their own memory shows

    @property
    def is_edit(self) -> bool:
        return self.family in ("edit", "write", "patch") or (self.family == "shell" and bool(self.writes))

    @property
    def is_run(self) -> bool:
        return self.family == "shell" and bool(self.command)

    def same_check(self, other: _Action) -> bool:
        if not (self.is_run and other.is_run):
            return False
        if self.runner and self.runner == other.runner:
            return True
        return self.key == other.key


def _input_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            loaded = json.loads(value)
        except ValueError:
            return {}
        return loaded if isinstance(loaded, dict) else {}
    return {}


def _family(name: str, raw_input: Any) -> str:
    lowered = name.lower()
    if own_tool(lowered):
        return "skip"
    if lowered == "exitplanmode":
        return "plan" if isinstance(_input_dict(raw_input).get("plan"), str) else "skip"
    for family, names in (
        ("read", _READ_TOOLS), ("search", _SEARCH_TOOLS), ("edit", _EDIT_TOOLS), ("write", _WRITE_TOOLS),
        ("shell", _SHELL_TOOLS), ("task", _TASK_TOOLS), ("skip", _SKIP_TOOLS),
    ):
        if lowered in names:
            return family
    if lowered == "apply_patch":
        return "patch"
    return "other"


def _digest(index: int, call: ToolCall, turn: Turn, earlier: Sequence[_Action], full: bool) -> _Action:
    """Digest one call. Calls outside the batch (``full`` false) only need their outcome when they ran a
    command (the bugfix rule looks at runs), so the others skip reading their response."""
    name = call.name if isinstance(call.name, str) else str(call.name or "")
    family = _family(name, call.input)
    command_like = family in ("shell", "other")
    outcome = _outcome(call.response, command_like) if full or family == "shell" else _Outcome()
    action = _Action(index=index, call=call, family=family, outcome=outcome, label=name or "tool", detailed=full)
    base = outermost(turn.cwd, call.cwd)
    named = [_input_dict(c.input) for c in (*turn.tools, *(a.call for a in earlier), call)]
    paths = _Paths(base=base, anchor=call.cwd or turn.cwd, roots=workdirs(named, base))
    digest = {
        "read": _digest_read, "search": _digest_search, "edit": _digest_edit, "write": _digest_write,
        "patch": _digest_patch, "shell": _digest_shell,
    }.get(family)
    if digest is not None:
        digest(action, _input_dict(call.input), paths, earlier)
    return action


def _digest_read(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    raws = [data.get(key) for key in ("file_path", "absolute_path", "notebook_path", "path")]
    listed = data.get("paths")
    raws.extend(listed if isinstance(listed, list) else [])
    action.reads = paths.resolve_all(raws)
    action.hints = [f"read {_listing(action.reads)}"] if action.reads else []


def _digest_search(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    lowered = action.label.lower()
    where = data.get("path") or data.get("dir_path") or data.get("directory")
    pattern = data.get("pattern") if isinstance(data.get("pattern"), str) else None
    if lowered == "glob" and pattern:
        joined = posixpath.join(where, pattern) if isinstance(where, str) and where else pattern
        action.reads = paths.resolve_all([joined])
    else:
        action.reads = paths.resolve_all([where])
    action.hints = [_search_hint(lowered, data, pattern, action)]


def _search_hint(lowered: str, data: dict[str, Any], pattern: str | None, action: _Action) -> str:
    count = _match_count(action.call.response)
    suffix = f" → {count}" if count else ""
    place = f" in {action.reads[0]}" if action.reads and lowered != "glob" else ""
    if lowered in ("websearch", "google_web_search"):
        return f"web search: {_clip(str(data.get('query') or ''), 120)}"
    if lowered in ("webfetch", "web_fetch"):
        return f"fetched {_clip(str(data.get('url') or data.get('prompt') or ''), 160)}"
    if lowered in ("ls", "list_directory"):
        return f"listed {action.reads[0] if action.reads else 'the working directory'}{suffix}"
    if lowered == "glob":
        return f"glob `{_clip(pattern or '', 80)}`{suffix}"
    return f"searched for `{_clip(pattern or '', 80)}`{place}{suffix}"


def _match_count(response: Any) -> str | None:
    if isinstance(response, dict):
        for key, word in (("numFiles", "files"), ("numMatches", "matches"), ("numLines", "lines")):
            value = response.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return f"{value} {word}"
    return None


def _digest_edit(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    target = paths.resolve(data.get("file_path") or data.get("notebook_path") or data.get("path"))
    action.writes = [target] if target else []
    where = target or "a file"
    edits = data.get("edits") if isinstance(data.get("edits"), list) else None
    if edits is not None:
        pairs = [(e.get("old_string"), e.get("new_string")) for e in edits if isinstance(e, dict)]
        old = "\n".join(str(o or "") for o, _ in pairs)
        new = "\n".join(str(n or "") for _, n in pairs)
        verb = f"edited {where} ({len(edits)} edits)"
    elif "notebook_path" in data or "cell_id" in data or "new_source" in data:
        old, new = "", str(data.get("new_source") or "")
        verb = f"{data.get('edit_mode') or 'replace'} notebook cell in {where}"
    else:
        old, new = str(data.get("old_string") or ""), str(data.get("new_string") or "")
        verb = f"edited {where}" + (" (all occurrences)" if data.get("replace_all") else "")
    _describe_change(action, verb, change(old, new) if action.detailed else EditChange())


def _describe_change(action: _Action, verb: str, found: EditChange) -> None:
    """The hint lines of an edit: what it did to which definitions, then the telling new lines."""
    if not action.detailed:
        return
    said = found.describe()
    action.hints.append(f"{verb}: {'; '.join(said)}" if said else verb)
    if found.gist:
        action.hints.append(f"{_NEW_TEXT}{' ⏎ '.join(found.gist)}")
    action.names = _unique([*action.names, *found.added, *(b for _, b in found.renamed)])


def _digest_write(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    target = paths.resolve(data.get("file_path") or data.get("path") or data.get("absolute_path"))
    action.writes = [target] if target else []
    content = str(data.get("content") or "")
    action.created = _is_new_file(action.call.response, target, earlier)
    verb = "created" if action.created else "rewrote"
    found = change("", content, budget=260) if action.detailed else EditChange()
    found.keys = found.keys if not found.added else []  # a new file's definitions say more than its keys
    _describe_change(action, f"{verb} {target or 'a file'} ({_lines(content)} lines)", found)


def _is_new_file(response: Any, target: str | None, earlier: Sequence[_Action]) -> bool:
    """A Write creates a file when the response says so, or (unsaid) when the turn never touched it before."""
    if isinstance(response, dict) and response.get("type") in ("create", "update"):
        return response["type"] == "create"
    text = _response_text(response)[:300].lower()
    if "created" in text or "new file" in text:
        return True
    if "updated" in text or "overwrote" in text or "overwritten" in text:
        return False
    return not any(target and (target in a.reads or target in a.writes) for a in earlier)


def _digest_patch(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    raw = action.call.input
    files = _parse_patch(patch_text(raw if not data else data))
    _apply_patch_files(action, files, paths)


def _apply_patch_files(action: _Action, files: list[_PatchFile], paths: _Paths) -> None:
    for item in files:
        path = paths.resolve(item.path) or item.path
        action.writes.append(path)
        if item.moved_to:
            moved = paths.resolve(item.moved_to) or item.moved_to
            action.writes.append(moved)
            action.hints.append(f"moved {path} → {moved}")
        if item.action == "add":
            action.hints.append(f"added {path} (+{item.added})")
        elif item.action == "delete":
            action.hints.append(f"deleted {path}")
        elif item.added or item.removed or not item.moved_to:
            action.hints.append(f"updated {path} (+{item.added}/-{item.removed})")
        action.names.extend(item.names)
    action.writes = _unique(action.writes)
    action.names = _unique(action.names)
    gists = [line for item in files for line in item.gist]
    if action.names:
        action.hints.append(f"added {_listing(action.names, 3)}")
    if gists:
        action.hints.append(f"{_NEW_TEXT}{' ⏎ '.join(gists[:4])}")
    action.created = bool(files) and all(item.action == "add" for item in files)
    action.moves_only = bool(files) and all(item.moved_to and not (item.added or item.removed) for item in files)


def _digest_shell(action: _Action, data: dict[str, Any], paths: _Paths, earlier: Sequence[_Action]) -> None:
    raw = action.call.input
    command = _shell_command(data if data else raw)
    action.command = command.strip() or None
    if not action.command:
        return
    action.shown = _display_command(action.command, paths.base)
    action.key = _check_key(action.command)
    action.description = _shell_description(data)
    workdir = data.get("workdir") or data.get("directory") or data.get("cwd")
    if isinstance(workdir, str) and workdir:
        paths = _Paths(base=paths.base, anchor=_join(paths, workdir), roots=paths.roots)
    if "*** Begin Patch" in command or re.search(r"^\*\*\* (?:Add|Update|Delete) File:", command, re.MULTILINE):
        action.family = "patch"
        _apply_patch_files(action, _parse_patch(command), paths)
        return
    effects = _ShellEffects()
    _script_effects(command, effects)
    _apply_shell_effects(action, effects, paths)


def _shell_description(data: dict[str, Any]) -> str:
    """The agent's one-line account of a shell call (``tool_input.description``), clipped; empty when none."""
    value = data.get("description")
    return _clip(value, DESCRIPTION_MAX) if isinstance(value, str) else ""


def _subject(action: _Action, limit: int) -> tuple[str, bool]:
    """How a title names a command: the command as code when it fits in ``limit`` on one line, else the
    agent's description of it when there is one. The flag tells whether the description was used."""
    command = (action.command or "").strip()
    if action.description and (len(action.shown) > limit or "\n" in command):
        return action.description[0].upper() + action.description[1:], True
    return _code(action.shown, limit), False


def _purpose(action: _Action) -> list[str]:
    return [f"{_PURPOSE}{action.description}"] if action.description else []


def _display_command(command: str, base: str | None) -> str:
    """The first line of a command, with ``"$(cat <<'EOF' ... EOF)"`` shown as its first body line and paths
    under the project directory written relative to it."""
    folded = re.sub(
        r"\$\(cat <<-?\s*(['\"]?)(\w+)\1\s*\n\s*([^\n]*)\n.*?\n\s*\2\s*\n?\s*\)", r"\3", command, flags=re.DOTALL
    )
    if base and _is_abs(base) and len(base) > 1:
        prefix = re.escape(base.rstrip("/") + "/")
        folded = re.sub(rf"(^|[;&|(]\s*){prefix}", r"\1./", folded)
        folded = folded.replace(base.rstrip("/") + "/", "")
    return " ".join(folded.strip().splitlines()[0].split()) if folded.strip() else ""


def _join(paths: _Paths, workdir: str) -> str:
    if _is_abs(workdir) or not paths.anchor:
        return workdir
    return posixpath.join(paths.anchor, workdir)


def _apply_shell_effects(action: _Action, effects: _ShellEffects, paths: _Paths) -> None:
    moved = [(paths.resolve(a) or a, paths.resolve(b) or b) for a, b in effects.moves]
    deleted = paths.resolve_all(effects.deletes)
    written = paths.resolve_all(effects.writes)
    executed = [path for path in paths.resolve_all(effects.executed) if not _is_abs(path)]
    action.reads = _unique([*paths.resolve_all(effects.reads), *executed])
    action.writes = _unique([*written, *deleted, *(p for pair in moved for p in pair)])
    action.runner = effects.runner
    action.moves_only = bool(moved) and not written and not deleted
    action.deletes_only = bool(deleted) and not written and not moved
    action.read_only_shell = effects.read_only and not action.writes and not effects.runner
    action.hints.extend(f"moved {a} → {b}" for a, b in moved[:LIST_MAX])
    if deleted:
        action.hints.append(f"deleted {_listing(deleted)}")
    if written:
        action.hints.append(f"wrote {_listing(written)}")
