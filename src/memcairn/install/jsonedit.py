"""Editing agents' JSON settings without disturbing the rest: parse, change our entries, write back in the
file's own style (indentation, separators, trailing newline, key order).

Our entries are found by their content, not by a marker field: a hook handler is ours when its command
runs ``memcairn hook ...`` (``specs.is_memcairn_command``), an MCP server when its key is ``memcairn``.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

from memcairn.core.errors import ConfigError
from memcairn.install.specs import is_memcairn_command

SERVER_KEY = "memcairn"

Path_ = tuple[str, ...]  # a key path inside the document, e.g. ("hooks", "Stop")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class JsonStyle:
    indent: int | str | None = 2  # None: everything on one line
    item_separator: str = ","
    key_separator: str = ": "
    ensure_ascii: bool = False
    trailing_newline: bool = True
    newline: str = "\n"  # "\r\n" for a file written on Windows

    def dump(self, value: Any) -> str:
        text = json.dumps(value, indent=self.indent, ensure_ascii=self.ensure_ascii,
                          separators=(self.item_separator, self.key_separator))
        # A lone surrogate (read from a "\\ud83d" escape, as JSON.stringify writes a string cut inside an emoji)
        # cannot be written as UTF-8: keep it the escape it was.
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
        text = text + "\n" if self.trailing_newline else text
        return text.replace("\n", self.newline)  # json.dumps escapes newlines inside strings


DEFAULT_STYLE = JsonStyle()


def detect_style(text: str) -> JsonStyle:
    """The formatting ``text`` was written with, as far as ``json.dumps`` can reproduce it."""
    if not text.strip():
        return DEFAULT_STYLE
    trailing = text.endswith("\n")
    newline = "\r\n" if "\r\n" in text else "\n"
    ensure_ascii = text.isascii() and re.search(r"\\u(?!00[0-7])[0-9a-fA-F]{4}", text) is not None
    body = text.strip()
    if re.fullmatch(r"\{\s*\}", body):  # an empty object says nothing: write it as a new file
        return JsonStyle(trailing_newline=trailing, newline=newline)
    if "\n" not in body:
        key = ": " if re.search(r'":\s', body) else ":"
        item = ", " if re.search(r",\s", body) else "," if "," in body else key.replace(":", ",")
        return JsonStyle(None, item, key, ensure_ascii, trailing, newline)
    indent: int | str = 2
    for line in body.splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if stripped and len(stripped) < len(line):
            lead = line[: len(line) - len(stripped)]
            indent = lead if "\t" in lead else len(lead)
            break
    key = ": " if re.search(r'":\s', body) or not re.search(r'":\S', body) else ":"
    return JsonStyle(indent, ",", key, ensure_ascii, trailing, newline)


_JSONC_PARTS = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/', re.DOTALL)
_TRAILING_COMMA = re.compile(r'"(?:[^"\\]|\\.)*"|,(?=\s*[}\]])', re.DOTALL)


def _without_comments(text: str) -> str:
    """JSON with comments (``//``, ``/* */``) and trailing commas, as Gemini CLI's settings allow, made plain
    JSON: each comment becomes spaces, each trailing comma one space (strings are left alone)."""
    def blank(match: re.Match[str]) -> str:
        part = match.group()
        return part if part.startswith('"') else re.sub(r"[^\n]", " ", part)
    return _TRAILING_COMMA.sub(blank, _JSONC_PARTS.sub(blank, text))


def parse_object(text: str | None, path: str) -> dict[str, Any]:
    """The JSON object in ``text`` (an absent or blank file is an empty object); comments and trailing commas
    are read too (a rewrite keeps them: ``jsontext``).

    Raises:
        ConfigError: the text is not JSON, or not an object; the message names the file and the spot.
    """
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        try:
            value = json.loads(_without_comments(text))
        except ValueError:
            raise ConfigError(f"{path} is not valid JSON: {exc}; fix it (or add the entries by hand), "
                              "nothing was changed") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path} must hold a JSON object at the top, not {type(value).__name__}; "
                          "nothing was changed")
    return value


def _container(doc: dict[str, Any], path: Path_, kind: type, created: list[Path_], where: str) -> Any:
    """The container at ``path`` (made, and recorded in ``created``, when missing)."""
    node: Any = doc
    for depth, key in enumerate(path):
        want = kind if depth == len(path) - 1 else dict
        if key not in node:
            node[key] = want()
            created.append(path[: depth + 1])
        node = node[key]
        if not isinstance(node, want):
            label = ".".join(path[: depth + 1])
            raise ConfigError(f"{where}: {label} must be a JSON {'object' if want is dict else 'array'}, "
                              f"not {type(node).__name__}; fix it, nothing was changed")
    return node


def _is_ours(handler: Any) -> bool:
    return isinstance(handler, dict) and is_memcairn_command(handler.get("command"))


def _strip_ours(groups: list[Any]) -> tuple[list[Any], int | None]:
    """``groups`` without our handlers (groups left empty by that dropped), and the index where the first
    group made only of our handlers stood (None when there was none)."""
    kept: list[Any] = []
    slot = None
    for group in groups:
        handlers = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(handlers, list) or not any(_is_ours(h) for h in handlers):
            kept.append(group)
            continue
        rest = [h for h in handlers if not _is_ours(h)]
        if rest:
            kept.append({**group, "hooks": rest})
        elif slot is None:
            slot = len(kept)
    return kept, slot


def has_our_hooks(doc: dict[str, Any]) -> bool:
    hooks = doc.get("hooks")
    if not isinstance(hooks, dict):
        return False
    return any(isinstance(groups, list) and _strip_ours(groups)[0] != groups for groups in hooks.values())


def apply_hooks(doc: dict[str, Any], groups: dict[str, dict[str, Any]], where: str) -> tuple[dict[str, Any],
                                                                                             list[Path_]]:
    """A copy of ``doc`` with our hook group for each event of ``groups`` (event -> group) and no other
    handler of ours. A group of ours already present is replaced where it stands; else ours is appended.
    Returns the new document and the containers that had to be created.

    Raises:
        ConfigError: ``hooks`` or an event's value has the wrong type.
    """
    out = copy.deepcopy(doc)
    created: list[Path_] = []
    hooks = _container(out, ("hooks",), dict, created, where)
    for event in list(hooks):
        if event not in groups and isinstance(hooks[event], list):
            kept, _ = _strip_ours(hooks[event])
            if kept != hooks[event]:
                if kept:
                    hooks[event] = kept
                else:
                    del hooks[event]  # a list only we used (an event a previous version registered)
    for event, group in groups.items():
        current = _container(out, ("hooks", event), list, created, where)
        kept, slot = _strip_ours(current)
        kept.insert(len(kept) if slot is None else slot, group)
        hooks[event] = kept
    return out, created


def remove_hooks(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` without any handler of ours (groups left empty are dropped, event lists are kept)."""
    out = copy.deepcopy(doc)
    hooks = out.get("hooks")
    if isinstance(hooks, dict):
        for event, groups in hooks.items():
            if isinstance(groups, list):
                hooks[event] = _strip_ours(groups)[0]
    return out


def apply_server(doc: dict[str, Any], entry: dict[str, Any], where: str) -> tuple[dict[str, Any], list[Path_], Any]:
    """A copy of ``doc`` with ``mcpServers.memcairn = entry``; also the containers created and the entry it
    replaced (None when there was none). Keys the user added to a command entry (``env``, ``timeout``,
    ``trust``...) are kept; ``entry``'s keys win.

    Raises:
        ConfigError: ``mcpServers`` is not an object.
    """
    out = copy.deepcopy(doc)
    created: list[Path_] = []
    servers = _container(out, ("mcpServers",), dict, created, where)
    previous = servers.get(SERVER_KEY)
    keep = isinstance(previous, dict) and "command" in previous  # not a url server that happens to be named so
    servers[SERVER_KEY] = {**previous, **entry} if keep else entry
    return out, created, previous


def remove_server(doc: dict[str, Any], previous: Any = None) -> dict[str, Any]:
    """A copy of ``doc`` without our MCP server (or with ``previous`` back, when it replaced one)."""
    out = copy.deepcopy(doc)
    servers = out.get("mcpServers")
    if isinstance(servers, dict) and SERVER_KEY in servers:
        if previous is None:
            del servers[SERVER_KEY]
        else:
            servers[SERVER_KEY] = previous
    return out


def add_to_list(doc: dict[str, Any], path: Path_, names: list[str], where: str) -> tuple[dict[str, Any],
                                                                                   list[Path_], list[str]]:
    """A copy of ``doc`` whose list at ``path`` holds ``names`` too; also the containers created and the names
    that were added (those already there are the user's).

    Raises:
        ConfigError: a container on the path has the wrong type.
    """
    out = copy.deepcopy(doc)
    created: list[Path_] = []
    values = _container(out, path, list, created, where)
    added = [n for n in names if n not in values]
    values.extend(added)
    return out, created, added


def remove_from_list(doc: dict[str, Any], path: Path_, names: list[str]) -> dict[str, Any]:
    """A copy of ``doc`` without ``names`` in the list at ``path`` (when there is one)."""
    out = copy.deepcopy(doc)
    node: Any = out
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and isinstance(node.get(path[-1]), list):
        node[path[-1]] = [v for v in node[path[-1]] if v not in names]
    return out


def prune(doc: dict[str, Any], paths: list[Path_]) -> dict[str, Any]:
    """Drop the containers at ``paths`` that are empty, deepest first (those an install created)."""
    out = copy.deepcopy(doc)
    for path in sorted({tuple(p) for p in paths}, key=len, reverse=True):
        parent: Any = out
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and path[-1] in parent and parent[path[-1]] in ({}, []):
            del parent[path[-1]]
    return out
