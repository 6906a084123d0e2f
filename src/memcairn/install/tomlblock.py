"""A delimited block of TOML in a file we otherwise leave byte for byte alone (Codex's ``config.toml``).

Python can read TOML (``tomllib``) but not write it, so the installer does not rewrite the file: it adds
one block between two marker comments and later removes exactly that block. ``tomllib`` checks the file
before and after. The block is written in the file's line endings, and found in either (an editor or git's
``autocrlf`` may convert the file after the install).

The block holds dotted keys of the root table (``mcp_servers.memcairn.command = ...``) and goes before the
file's first table: a table header of ours would be the file's last table, and whatever is appended later (a
key a person adds at the end, the ``[hooks.state...]`` tables Codex writes when hooks are trusted) would land
in it, and be removed with it. A file whose ``mcp_servers`` cannot take dotted keys (an ``[mcp_servers]``
header, an inline table) gets the ``[mcp_servers.memcairn]`` table appended instead. Whatever another program
wrote between our markers is kept when the block is removed: uninstall takes only memcairn's lines.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from memcairn.core.errors import ConfigError

BEGIN = "# >>> memcairn: added by `memcairn install codex`; `memcairn uninstall codex` removes this block >>>"
END = "# <<< memcairn <<<"
_BLOCK = re.compile(rf"^{re.escape(BEGIN)}\r?\n.*?^{re.escape(END)}(?:\r?\n)?", re.MULTILINE | re.DOTALL)
PREFIX = "mcp_servers.memcairn."
TABLE = "[mcp_servers.memcairn]"
# The keys memcairn writes; a line setting one of them inside the block is memcairn's, whoever edited it.
OWN_KEYS = ("command", "args", "env_vars", "required", "startup_timeout_sec")
STARTUP_TIMEOUT_SEC = 30
_HEADER = re.compile(r"^[ \t]*\[", re.MULTILINE)
_KEY_LINE = re.compile(r"^\s*([A-Za-z0-9_.\"'-]+?)\s*=")


def newline_of(text: str) -> str:
    """The line ending ``text`` uses: CRLF when it has any (a file written on Windows), else LF."""
    return "\r\n" if "\r\n" in text else "\n"


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are all valid TOML escapes)."""
    return json.dumps(value, ensure_ascii=False)


def server_settings(executable: str, variables: list[str], args: list[str]) -> list[tuple[str, str]]:
    """Our server's keys and TOML values. ``env_vars``: Codex gives an MCP server only a few variables of its
    own environment (``HOME``, ``PATH``); memcairn's settings must be named to reach it. ``required``: Codex
    waits for the server before its first model request (else a cold server's tools are missing from it)."""
    return [("command", toml_string(executable)), ("args", "[" + ", ".join(toml_string(a) for a in args) + "]"),
            ("env_vars", "[" + ", ".join(toml_string(v) for v in variables) + "]"),
            ("required", "true"), ("startup_timeout_sec", str(STARTUP_TIMEOUT_SEC))]


def server_block(executable: str, variables: list[str], args: list[str]) -> str:
    """The block in its dotted form (see the module docstring)."""
    keys = server_settings(executable, variables, args)
    return f"{BEGIN}\n" + "".join(f"{PREFIX}{k} = {v}\n" for k, v in keys) + f"{END}\n"


def table_block(block: str) -> str:
    """The same block as an ``[mcp_servers.memcairn]`` table, for a file that cannot take the dotted form."""
    lines = block.splitlines()[1:-1]
    return f"{BEGIN}\n{TABLE}\n" + "".join(line[len(PREFIX):] + "\n" for line in lines) + f"{END}\n"


def _split_block(old_block: str) -> tuple[list[str], list[str]]:
    """The lines inside an old block: (settings of our server a person added, as dotted lines; everything
    else another program or the person put there, as it was). Our own keys are dropped."""
    ours, foreign = [], []
    table: str | None = ""  # "" = the root table; None = a table that is not ours
    for line in old_block.splitlines()[1:-1]:
        stripped = line.strip()
        if stripped.startswith("["):
            name = stripped.strip("[] ")
            table = name[len("mcp_servers.memcairn"):].lstrip(".") + "." if (
                name == "mcp_servers.memcairn" or name.startswith("mcp_servers.memcairn.")) else None
            if table is None:
                foreign.append(line)
            elif table != ".":
                continue
            continue
        if table is None:
            foreign.append(line)
            continue
        key = _KEY_LINE.match(line)
        dotted = (PREFIX + (table if table != "." else "") + stripped) if table else stripped
        if key is None or not dotted.startswith(PREFIX):
            if stripped and (key is not None or not ours):
                foreign.append(line)
            elif stripped:
                ours.append(line.strip())  # a continuation line of a value of ours
            continue
        if dotted[len(PREFIX):].split("=")[0].strip() in OWN_KEYS:
            continue
        ours.append(dotted)
    return ours, foreign


def parse(text: str, path: str) -> dict[str, Any]:
    """
    Raises:
        ConfigError: ``text`` is not valid TOML.
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}; fix it (or add the entry by hand), "
                          "nothing was changed") from None


def find_block(text: str) -> re.Match[str] | None:
    return _BLOCK.search(text)


def separator_for(text: str) -> str:
    """What goes between existing text and an appended block: a blank line (after a newline if missing)."""
    if not text:
        return ""
    newline = newline_of(text)
    return newline if text.endswith("\n") else newline * 2


def _first_table(text: str) -> int | None:
    """Where the file's first table header starts (outside multi-line strings, as ``tomllib`` would say)."""
    for match in _HEADER.finditer(text):
        try:
            tomllib.loads(text[: match.start()])
        except tomllib.TOMLDecodeError:
            continue  # inside a multi-line string
        return match.start()
    return None


def add_block(text: str | None, block: str, path: str, separator: str | None = None) -> tuple[str, str | None]:
    """``text`` with ``block`` in place of ours (``separator``: how the old one was placed, see
    ``remove_block``); also how the new one was placed: the separator appended before it (at the end of the
    file), or None when it went in before the first table (followed by one blank line). Settings a person
    added to our server inside the old block are kept; other programs' lines in it stay where they were.

    Raises:
        ConfigError: the file is not valid TOML, already defines ``mcp_servers.memcairn`` outside our
            block, or would not be valid with the block.
    """
    text = text or ""
    newline = newline_of(text)
    match = find_block(text)
    extra: list[str] = []
    if match:
        extra = _split_block(match.group(0))[0]
        text = remove_block(text, separator)
    existing = parse(text, path)
    servers = existing.get("mcp_servers")
    if isinstance(servers, dict) and "memcairn" in servers:
        raise ConfigError(f"{path} already defines [mcp_servers.memcairn] outside memcairn's block; remove "
                          "that table (or keep it and skip this step), nothing was changed")
    if extra:
        block = block[: -len(END) - 1] + "".join(line + "\n" for line in extra) + f"{END}\n"
    at = _first_table(text)
    candidates: list[tuple[str, str | None]] = []
    if at is not None:
        candidates.append((text[:at] + block.replace("\n", newline) + newline + text[at:], None))
    else:
        separator = separator_for(text)
        candidates.append((text + separator + block.replace("\n", newline), separator))
    separator = separator_for(text)
    candidates.append((text + separator + table_block(block).replace("\n", newline), separator))
    error = None
    for new, placed in candidates:
        try:
            tomllib.loads(new)
        except tomllib.TOMLDecodeError as exc:
            error = exc
            continue
        return new, placed
    raise ConfigError(f"{path} cannot take a [mcp_servers.memcairn] table ({error}: is mcp_servers an inline "
                      f"table?); add this by hand instead, nothing was changed:\n{table_block(block)}")


def remove_block(text: str, separator: str | None) -> str:
    """``text`` without our block: without the separator the install appended before it (when the block is
    still at the end and the separator is known; else one blank line before it), or the blank line it put
    after it (a block before the first table, ``separator`` None). Lines another program wrote inside the
    block (Codex's ``[hooks.state...]`` trust tables, a key) stay where they were."""
    match = find_block(text)
    if match is None:
        return text
    before, after = text[: match.start()], text[match.end():]
    newline = newline_of(text)
    foreign = "".join(line + newline for line in _split_block(match.group(0))[1])
    if foreign:
        return before + foreign + after
    if after and _first_table(before) is None and _HEADER.match(after.lstrip("\r\n")) and separator is None:
        return before + (after[len(newline):] if after.startswith(newline) else after)
    if separator is None:
        separator = newline if before.endswith(newline * 2) else ""
    separator = separator.replace("\r\n", "\n").replace("\n", newline)  # the file may have been converted since
    if not after and separator and before.endswith(separator):
        before = before[: -len(separator)]
    elif after and separator and before.endswith(newline * 2):
        before = before[: -len(newline)]  # the block's own blank line; what follows starts on a line of its own
    return before + after
