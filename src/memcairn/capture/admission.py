"""What may enter the queue: the rules applied to every event before it is stored (live hooks and imports).

- Projects matching ``exclude_projects`` (globs, any name of the chain) are neither captured nor given context.
- Tools named in ``skip_tools`` or ``housekeeping_tools`` (the agents' own machinery: Claude Code's
  ``ToolSearch``, ``WaitForMcpServers``, …; a default list the person may empty), and memcairn's own MCP tools
  in every agent's spelling (``protocol.own_tool``), are never observed: names compare without case.
- Context an agent injected into a prompt (Gemini CLI prepends the SessionStart context in ``<hook_context>``)
  is removed before the prompt is stored (``fence.strip_injected``), so memcairn's own digest never
  becomes a prompt, a session title or a memory.
- ``<private>`` parts are removed and secrets replaced by typed placeholders everywhere in the body; a prompt
  that was entirely private is kept only as a marker (``private: true``, no text) so that the tool calls of
  its turn are not observed either.

Memories that reach the store without passing through the queue (``POST /api/memory/save``, the claude-mem
importer) get the same scrubbing through ``scrub_item``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from memcairn.core.models import ARRAY_FIELDS, OBJECT_FIELDS, TEXT_FIELDS, NewItem
from memcairn.store.records import event_kind
from memcairn.wire.config import Settings
from memcairn.wire.fence import strip_injected
from memcairn.wire.privacy.private_tags import is_entirely_private
from memcairn.wire.privacy.scrubbing import scrub
from memcairn.wire.protocol import own_tool
from memcairn.wire.settings_source import project_excluded as excluded_by


@dataclass(frozen=True)
class Admission:
    body: dict[str, Any] | None  # what to store; None = nothing
    reason: str | None = None  # why nothing: excluded_project | skipped_tool


def _names(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def project_excluded(names: Iterable[str], settings: Settings) -> bool:
    return excluded_by(names, settings.exclude_projects)


def event_projects(body: dict[str, Any]) -> list[str]:
    """The project names an event may be filed under, spelled as the pipeline spells them (stripped): the
    ``project`` and the ``projects`` chain, and, when no project is named, the chain of the project its
    ``cwd`` names (what the pipeline then files the event under)."""
    project = body.get("project")
    names = [project]
    chain = body.get("projects")
    if isinstance(chain, list):
        names += chain
    if not (isinstance(project, str) and project.strip()):
        cwd = body.get("cwd")
        if isinstance(cwd, str) and cwd.strip():
            from memcairn.core.project import project_from_cwd

            names += list(project_from_cwd(cwd).chain)
    return [n.strip() for n in names if isinstance(n, str) and n.strip()]


def skipped_tool(name: str, settings: Settings) -> bool:
    """Whether calls of ``name`` are never observed (``skip_tools``, ``housekeeping_tools``, memcairn's own)."""
    skipped = {n.lower() for n in (*_names(settings.skip_tools), *_names(settings.housekeeping_tools))}
    return name.strip().lower() in skipped or own_tool(name.strip())


def admit(event_type: str, body: dict[str, Any], settings: Settings) -> Admission:
    if project_excluded(event_projects(body), settings):
        return Admission(None, "excluded_project")
    tool = body.get("tool_name")
    if isinstance(tool, str) and skipped_tool(tool, settings):
        return Admission(None, "skipped_tool")
    is_prompt = event_kind(event_type, body) == "user_prompt"
    if is_prompt and isinstance(body.get("prompt"), str):
        body = {**body, "prompt": strip_injected(body["prompt"])}
    clean = scrub(body)
    prompt = body.get("prompt")
    if is_prompt and isinstance(prompt, str) and is_entirely_private(prompt):
        clean["prompt"] = ""
        clean["private"] = True
    return Admission(clean)


def scrub_item(item: NewItem) -> NewItem:
    """``item`` with private parts removed and secrets redacted in every stored text: the text fields (title,
    subtitle, text, narrative, the summary sections), the list fields (facts, concepts, files) and the strings of
    the object fields (metadata, anchors). A text left blank once its private parts are gone becomes None and a
    blank list element is dropped, so an entirely private memory ends up with no content (validation then refuses
    it)."""
    changes: dict[str, Any] = {}
    for name in TEXT_FIELDS:
        value = getattr(item, name)
        if isinstance(value, str):
            clean = scrub(value)
            changes[name] = clean if clean.strip() else None
    for name in ARRAY_FIELDS:
        values = getattr(item, name)
        if values and not isinstance(values, str | bytes):
            changes[name] = [c for c in (scrub(v) if isinstance(v, str) else v for v in values)
                             if not isinstance(c, str) or c.strip()]
    for name in OBJECT_FIELDS:
        value = getattr(item, name)
        if isinstance(value, dict) and value:
            changes[name] = scrub(value)
    return replace(item, **changes)
