"""A delimited block of TOML in a file we otherwise leave byte for byte alone (Codex's ``config.toml``).

Python can read TOML (``tomllib``) but not write it, so the installer does not rewrite the file: it
appends one block between two marker comments and later removes exactly that block. ``tomllib`` checks
the file before and after. The block is written in the file's line endings, and found in either (an editor or
git's ``autocrlf`` may convert the file after the install).
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from memcairn.errors import ConfigError

BEGIN = "# >>> memcairn: added by `memcairn install codex`; `memcairn uninstall codex` removes this block >>>"
END = "# <<< memcairn <<<"
_BLOCK = re.compile(rf"^{re.escape(BEGIN)}\r?\n.*?^{re.escape(END)}(?:\r?\n)?", re.MULTILINE | re.DOTALL)


def newline_of(text: str) -> str:
    """The line ending ``text`` uses: CRLF when it has any (a file written on Windows), else LF."""
    return "\r\n" if "\r\n" in text else "\n"


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are all valid TOML escapes)."""
    return json.dumps(value, ensure_ascii=False)


def server_block(executable: str) -> str:
    return (f"{BEGIN}\n[mcp_servers.memcairn]\ncommand = {toml_string(executable)}\n"
            f'args = ["mcp", "--platform", "codex"]\n{END}\n')


def _user_lines(old_block: str) -> str:
    """The lines the user added inside our block (``env``, ``startup_timeout_sec``, an ``.env`` table...):
    all but the markers and, in our table, its header, ``command`` and ``args``."""
    kept, in_ours = [], False
    for line in old_block.splitlines(keepends=True)[1:-1]:
        stripped = line.strip()
        if stripped.startswith("["):
            in_ours = stripped == "[mcp_servers.memcairn]"
            if in_ours:
                continue
        elif in_ours and re.match(r"(command|args)\s*=", stripped):
            continue
        kept.append(line.rstrip("\r\n") + "\n")
    return "".join(kept)


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


def add_block(text: str | None, block: str, path: str) -> tuple[str, str]:
    """``text`` with ``block`` in place of ours (or appended); also the separator that was appended. Lines
    the user added inside our block are kept.

    Raises:
        ConfigError: the file is not valid TOML, already defines ``mcp_servers.memcairn`` outside our
            block, or would not be valid with the block.
    """
    text = text or ""
    newline = newline_of(text)
    match = find_block(text)
    outside = text[: match.start()] + text[match.end():] if match else text
    existing = parse(outside, path)
    servers = existing.get("mcp_servers")
    if isinstance(servers, dict) and "memcairn" in servers:
        raise ConfigError(f"{path} already defines [mcp_servers.memcairn] outside memcairn's block; remove "
                          "that table (or keep it and skip this step), nothing was changed")
    if match:
        extra = _user_lines(match.group(0))
        if extra and block.endswith(f"{END}\n"):
            block = block[: -len(END) - 1] + extra + f"{END}\n"
        new = text[: match.start()] + block.replace("\n", newline) + text[match.end():]
        separator = ""
    else:
        separator = separator_for(text)
        new = text + separator + block.replace("\n", newline)
    try:
        tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} cannot take a [mcp_servers.memcairn] table ({exc}: is mcp_servers an inline "
                          f"table?); add this by hand instead, nothing was changed:\n{block}") from None
    return new, separator


def remove_block(text: str, separator: str | None) -> str:
    """``text`` without our block, and without the separator the install appended before it (when the
    block is still at the end and the separator is known; else one blank line before it)."""
    match = find_block(text)
    if match is None:
        return text
    before, after = text[: match.start()], text[match.end():]
    newline = newline_of(text)
    if separator is None:
        separator = newline if before.endswith(newline * 2) else ""
    separator = separator.replace("\r\n", "\n").replace("\n", newline)  # the file may have been converted since
    if not after and separator and before.endswith(separator):
        before = before[: -len(separator)]
    elif after and separator and before.endswith(newline * 2):
        before = before[: -len(newline)]  # the block's own blank line; what follows starts on a line of its own
    return before + after
