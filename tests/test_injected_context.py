"""Context an agent hands back inside the prompt (Gemini CLI's ``<hook_context>``) is never stored as the prompt."""

from __future__ import annotations

import html
import os
from pathlib import Path

import hook_helpers
import pytest
from processes import free_port

from memcairn.wire.fence import fence, strip_injected

DIGEST = fence("# memcairn memory · project calc\n#3 06:20 bugfix Division guarded")
TYPED = "Add a function called multiply_numbers"


def gemini_prompt(context: str, typed: str = TYPED) -> str:
    """What Gemini CLI 0.61 hands BeforeAgent: the SessionStart context, HTML-escaped, in front of the prompt."""
    return f"<hook_context>{html.escape(context, quote=False)}</hook_context>\n\n{typed}"


@pytest.mark.parametrize("prompt", [
    gemini_prompt(DIGEST),
    gemini_prompt(html.escape(DIGEST)),  # quotes escaped as well
    f"<hook_context>{DIGEST}</hook_context>{TYPED}",  # raw, no blank line
    f"{DIGEST}\n{TYPED}",  # the fence alone, from a client that adds no wrapper
    f"{html.escape(DIGEST)}\n\n{TYPED}",
    gemini_prompt("memcairn: no memories yet for calc; memory starts after the first session."),
    f"{TYPED}\n\n<hook_context>{html.escape(DIGEST)}</hook_context>",  # appended after the prompt
])
def test_injected_memcairn_context_is_stripped_escaped_or_not(prompt: str) -> None:
    assert strip_injected(prompt) == TYPED


def test_a_prompt_that_only_mentions_the_tags_is_kept_as_typed() -> None:
    typed = "Why does the parser drop <hook_context> blocks and the memcairn-memory tag?"
    assert strip_injected(typed) == typed
    other = f"Fix this: <hook_context>another tool's note</hook_context> {TYPED}"  # not in front, not ours
    assert strip_injected(other) == other
    assert strip_injected(gemini_prompt(DIGEST, "")) == ""


def test_gemini_s_digest_in_the_prompt_is_not_stored_as_the_prompt(tmp_path: Path, isolated_home: Path) -> None:
    env = {**os.environ, "MEMCAIRN_PORT": str(free_port()), "MEMCAIRN_EMBEDDING_MODEL": "hash"}
    project = tmp_path / "calc"
    (project / ".git").mkdir(parents=True)
    workers = hook_helpers.Workers()
    try:
        client = workers.start(env)
        data = hook_helpers.payload("user_prompt_submit", project, prompt=gemini_prompt(DIGEST),
                                  hook_event_name="BeforeAgent")
        assert hook_helpers.hook(env, "BeforeAgent", data, "--platform", "gemini-cli")[0] == {}
        # a client that sends the prompt as it got it (an older hook, a replayed transcript): the worker strips it
        client.post_json("/api/sessions/init", {"session_id": "older", "cwd": str(project), "event": "user_prompt",
                                                "prompt": gemini_prompt(html.escape(DIGEST)),
                                                "platform_source": "gemini-cli"})
    finally:
        workers.stop_all()
    prompts = [e.payload["prompt"] for e in hook_helpers.pending(isolated_home) if e.event_type == "session_init"]
    assert prompts == [TYPED, TYPED]
