"""A commit, read from its command line and its output: the message the agent wrote, and the files it took.

The message is the best account of a piece of work a session holds: agents write a subject and a body listing
what changed and why. It is read from the command (``-m``/``--message`` values, several joined; a
``"$(cat <<'EOF' … EOF)"`` here-document; ``-F -`` is not followed), else from git's ``[branch sha] subject``
output line. Trailers (``Co-Authored-By:``, ``Signed-off-by:``) are dropped. Files come from git's output
(``create mode …``, ``N files changed, …``) and from ``git add`` arguments on the same command line.
"""

from __future__ import annotations

import re
import shlex

from memcairn.capture.offline.text import _clip, _unique

BODY_MAX = 360
_COMMIT = re.compile(r"\bgit\b(?:\s+-[Cc]\s+\S+)*\s+commit\b")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1[^\n]*\n(.*?)\n\s*\2\b", re.DOTALL)
_TRAILER = re.compile(r"^\s*(?:Co-Authored-By|Signed-off-by|Reviewed-by|Generated with|🤖)\b.*$", re.I | re.M)
_SHA = re.compile(r"^\[[^\]\n]*?([0-9a-f]{7,40})\] ", re.MULTILINE)  # git's ``[branch 1a2b3c4] subject``
_SUBJECT_LINE = re.compile(r"^\[[^\]\n]+\] (.+)$", re.MULTILINE)
_STAT = re.compile(r"^\s*(\d+ files? changed(?:, \d+ insertions?\(\+\))?(?:, \d+ deletions?\(-\))?)", re.M)
_MODE = re.compile(r"^\s*(?:create|delete) mode \d+ (\S+)$|^\s*rename (\S+) \(\d+%\)$", re.MULTILINE)


def is_commit(command: str | None) -> bool:
    return bool(command and _COMMIT.search(command))


def commit_message(command: str, output: str) -> tuple[str, str] | None:
    """(subject, body) of the commit a command made; body may be empty."""
    text = _from_command(command) or ""
    if not text.strip():
        found = _SUBJECT_LINE.search(output[:4000])
        text = found.group(1) if found else ""
    text = _TRAILER.sub("", text).strip()
    if not text:
        return None
    subject, _, body = text.partition("\n")
    return _clip(subject, 160), _clip(body, BODY_MAX)


def commit_sha(output: str) -> str | None:
    """The short hash git printed for the commit (``[branch 1a2b3c4] subject``)."""
    found = _SHA.search(output[:4000])
    return found.group(1) if found else None


def _from_command(command: str) -> str | None:
    match = _COMMIT.search(command)
    if match is None:
        return None
    rest = command[match.end():]
    heredoc = _HEREDOC.search(rest)
    if heredoc and re.match(r"[^\n]*?(?:-\w*m|--message)[=\s]*[\"']?\$\(cat", rest):
        return heredoc.group(3)
    segment = re.split(r"&&|\|\||;|\n(?=\s*\w)", rest, maxsplit=1)[0]
    try:
        words = shlex.split(segment)
    except ValueError:
        return None
    messages = []
    for i, word in enumerate(words):
        if re.fullmatch(r"-\w*m", word) and i + 1 < len(words):
            messages.append(words[i + 1])
        elif word.startswith("--message="):
            messages.append(word.split("=", 1)[1])
        elif word == "--message" and i + 1 < len(words):
            messages.append(words[i + 1])
    return "\n\n".join(messages) or None


def commit_files(command: str, output: str) -> tuple[list[str], str | None]:
    """(files the commit named: created/deleted/renamed ones from git's output, then ``git add`` arguments;
    git's ``N files changed, …`` line)."""
    files = [a or b for a, b in _MODE.findall(output[:8000])]
    for segment in re.split(r"&&|\|\||;", command):
        try:
            words = shlex.split(segment)
        except ValueError:
            continue
        if len(words) > 2 and words[0] == "git" and words[1] == "add":
            files.extend(w for w in words[2:] if not w.startswith("-") and w not in (".", "-A"))
    stat = _STAT.search(output[:8000])
    return _unique(files), stat.group(1) if stat else None
