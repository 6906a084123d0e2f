"""Memories shown before the agent acts: a digest for the prompt (user-prompt-submit) and for a Read (pre-tool-use)."""

from __future__ import annotations

import os

from memcairn.hooks.hook import INGEST_TIMEOUT, Hook, _context_output, search_answer
from memcairn.hooks.runner import warn
from memcairn.wire.bodyfit import fit_body
from memcairn.wire.protocol import INIT_PATH, SEARCH_PATH, USER_PROMPT
from memcairn.wire.transport import Call

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DIGEST_TIMEOUT = 1.0
PROMPT_DIGEST_TOKENS = 300
PROMPT_DIGEST_ROWS = 3
PROMPT_QUERY_CHARS = 500
READ_DIGEST_TOKENS = 400
READ_DIGEST_ROWS = 5
NO_MATCH = "No memories matched"
TAG_TEXT = "memcairn-memory"  # fence.TAG, checked before the fence module (0.6 ms of patterns) is imported


def _answer_rows(answer: dict[str, Any]) -> list[str]:
    """The digest's rows from the search answer's structured ``rows`` (``search.rows``; a team server's ids as
    ``team#12``), each with its day: ``#12 2026-12-01 14:03 bugfix · Title · ~120 tok``."""
    rows = answer.get("rows")
    if not isinstance(rows, list):  # a worker from before the rows field, until it is replaced
        return _index_rows(answer["text"])
    out = []
    for row in rows:
        if not isinstance(row, dict):
            continue
        head = " ".join(str(row.get(k)) for k in ("id", "day", "time", "type") if row.get(k))
        parts = [head, str(row.get("title") or ""), *([str(row["project"])] if row.get("project") else []),
                 f"~{row.get('tokens')} tok", *(["weak"] if row.get("weak") is True else [])]
        out.append(" · ".join(parts))
    return out


def _index_rows(text: str) -> list[str]:
    """Rows of ``render_index`` text, each with its day (an older worker's answer has no ``rows``)."""
    rows, day = [], ""
    for line in text.splitlines():
        if line.startswith("### "):
            day = line[4:].strip()
        elif line.startswith("- #"):
            rest = line[2:]
            ident, _, tail = rest.partition(" ")
            rows.append(f"{ident} {day} {tail}".replace("  ", " ") if day else rest)
    return rows


def digest(heading: str, rows: list[str], max_tokens: int, max_rows: int) -> str:
    """A fenced block of ``heading`` and up to ``max_rows`` rows, dropping rows until it fits the budget."""
    from memcairn.wire.fence import clean_line, fence, fenced_size  # its patterns cost 0.6 ms to compile

    limit = max_tokens * 4
    kept = [clean_line(r, 300) for r in rows[:max_rows]]
    while kept:
        body = "\n".join([heading, *kept])
        if fenced_size(len(body)) <= limit:
            return fence(body)
        kept.pop()
    return ""


def _excluded(hook: Hook) -> bool:
    """Whether the project chain is excluded (``exclude_projects``): such a project is neither captured (the
    worker refuses its events) nor given memories, so the digests are not even asked for."""
    from memcairn.wire.settings_source import project_excluded

    return project_excluded(hook.identity.chain, str(hook.settings.get("exclude_projects") or ""))


def _search_digest(hook: Hook, call: Call | None, heading: Callable[[], str], max_tokens: int, max_rows: int) -> str:
    """The digest of a search's answer, under ``heading()`` (made only when there is one: it may need ``fence``,
    whose ``re`` a hook with nothing to show does without)."""
    answer = hook.wait(call, search_answer)
    if answer is None:
        return ""
    data = answer.json_object()  # search_answer: a JSON object with a text
    if data["text"].startswith(NO_MATCH):
        return ""
    return digest(heading(), _answer_rows(data), max_tokens, max_rows)


def user_prompt_submit(hook: Hook) -> dict[str, Any]:
    if hook.missing("session_id", "prompt"):
        return {}
    prompt = hook.payload["prompt"]
    if not isinstance(prompt, str):
        warn("the prompt is not text; nothing recorded")
        return {}
    if "hook_context" in prompt or TAG_TEXT in prompt:  # the context Gemini CLI put in front of the prompt
        from memcairn.wire.fence import strip_injected

        prompt = strip_injected(prompt)
    body = {**hook.base_body(USER_PROMPT), "prompt": prompt}
    number = hook.payload.get("prompt_number")
    if isinstance(number, int) and not isinstance(number, bool) and 0 <= number <= 1_000_000:
        body["prompt_number"] = number
    search = None
    if hook.settings["prompt_context"] and prompt.strip() and not _excluded(hook):
        search = hook.send("GET", SEARCH_PATH, timeout=DIGEST_TIMEOUT, params={
            "query": prompt[:PROMPT_QUERY_CHARS], "format": "index", "limit": PROMPT_DIGEST_ROWS,
            "project": list(hook.identity.chain)})
    init = hook.deliver(INIT_PATH, fit_body(body, ("prompt",), warn), INGEST_TIMEOUT)
    text = _search_digest(hook, search, lambda: "Memories that may relate to this prompt (most relevant first):",
                          PROMPT_DIGEST_TOKENS, PROMPT_DIGEST_ROWS) if search is not None else ""
    hook.delivered(init)
    return _context_output(hook, text)


def _read_target(hook: Hook) -> str | None:
    if hook.payload.get("tool_name") != "Read":
        return None
    tool_input = hook.payload.get("tool_input")
    path = tool_input.get("file_path") if isinstance(tool_input, dict) else None
    if not isinstance(path, str) or not path.strip():
        return None
    cwd = hook.cwd
    if os.path.isabs(path) and cwd:
        try:
            relative = os.path.relpath(path, cwd)
        except ValueError:
            relative = path
        if not relative.startswith(".."):
            return relative
    return path


def pre_tool_use(hook: Hook) -> dict[str, Any]:
    if hook.platform == "gemini-cli":  # Gemini takes no additionalContext before a tool runs
        return {}
    target = _read_target(hook)
    if target is None or _excluded(hook):
        return {}
    call = hook.send("GET", SEARCH_PATH, timeout=DIGEST_TIMEOUT, params={
        "files": target, "format": "index", "limit": READ_DIGEST_ROWS, "project": list(hook.identity.chain)})

    def heading() -> str:
        from memcairn.wire.fence import clean_line

        return f"Earlier sessions touched {clean_line(target, 200)} (newest first):"

    text = _search_digest(hook, call, heading, READ_DIGEST_TOKENS, READ_DIGEST_ROWS)
    return _context_output(hook, text)
