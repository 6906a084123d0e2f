"""The MCP tools: one ``MemoryTools`` method per tool, whose typed signature is the tool's one definition.

Each argument is ``Annotated`` with pydantic's ``Field`` (its description) and, where models send loose values, a
reader that takes them as meant (``"12"`` for 12, ``"12, 15"`` for ids) or refuses them in words the agent can act
on. From that signature come:

- the input schema ``tools/list`` shows: generated once (``python -m memcairn.mcp.tools``) into
  ``memcairn.mcp.schema`` through the MCP SDK's ``func_metadata``, which the server serves without importing
  pydantic; ``tests/test_mcp_schema.py`` fails when the two differ;
- the checking of a call's arguments: a pydantic model of the same signature, built on the first call;
- the call: the checked arguments are the method's keywords.

This module costs about 100 ms of CPU to import (pydantic): ``memcairn.mcp.server`` imports it on the first tool
call, never to answer the handshake or ``tools/list``.

Vocabulary, as over HTTP and in the CLI: ``kind`` is a record's kind (observations, summaries, prompts),
``type`` an observation's type (decision, bugfix...). Earlier spellings are still read (``ARGUMENT_ALIASES``;
``search``'s ``type`` naming a kind means the kind).
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, ValidationInfo, create_model
from pydantic import ValidationError as ArgumentError

from memcairn.core.errors import NotFoundError
from memcairn.core.project import ProjectIdentity, project_from_cwd
from memcairn.mcp.records import MAX_ENTRIES, MAX_FIELD_CHARS, MAX_RECORDS_CHARS, SHOW_IN_FULL, bounded, compact
from memcairn.mcp.server import ALL_PROJECTS, NO_CONTEXT, WORKFLOW, ToolError, WorkerGateway
from memcairn.wire.fastjson import dumps

MAX_IDS = 100
IDS_REQUIRED = 'ids is required: call search first to find ids, then pass them as a list, e.g. {"ids": [12, 15]}'
# Between the ids of one text ("12,15", "#12, #15", "12 15"): commas, semicolons and white space.
ID_SEPARATORS = re.compile(r"[\s,;]+")
# search, timeline and session_start_context send their arguments in the request's URL, and the worker refuses
# a request line over about 128 KB (it resets the connection, which reads as a dead worker); 10,000 characters
# stay under it even when every character is percent-encoded as three UTF-8 bytes.
URL_TOOLS = ("search", "timeline", "session_start_context")
MAX_URL_ARG_CHARS = 10_000
# Other names a tool takes for its arguments: earlier spellings (claude-mem's camelCase among them), and search's
# obs_type from before type meant an observation's type there (as over HTTP). A given new name wins.
ARGUMENT_ALIASES = {"timeline": {"depth_before": "before", "depth_after": "after"},
                    "search": {"dateStart": "date_start", "dateEnd": "date_end", "orderBy": "order_by",
                               "platformSource": "platform_source", "obs_type": "type"},
                    "session_start_context": {"projects": "project", "platformSource": "platform_source"}}
# search's kinds, and what each asks the worker for (saved memories are observations to the agent).
KINDS = {"observations": "observation,manual", "summaries": "summary", "prompts": "prompt", "all": None}
DATE_FORMS = "2026-08-01, ISO time or 7d"


# -- reading arguments ------------------------------------------------------------------------------
def shown(value: Any) -> str:
    """An argument as an error message quotes it: JSON, with its non-ASCII text as written ("²", not "\\u00b2")."""
    return dumps(value, ensure_ascii=False)


def whole(value: Any) -> int | None:
    """``value`` as a whole number, or None when it is not one.

    Accepted: an int; a float without a fraction (JSON Schema's "integer" admits 12.0, and some clients send
    numbers that way); text that ``int`` reads ("12", " -3 "). Text is parsed rather than checked with
    ``isdigit``, which also passes "²" and "--5" that ``int`` then refuses with an exception.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:  # not a number, or past int's digit limit
            return None
    return None


def _id_entries(value: Any) -> list[Any]:
    """The entries of an ``ids`` argument: a list as given, and text split into its ids.

    Models often send ids as one text ("12,15", "#12, #15", even "[12, 15]") where the schema asks for a
    list; that is read as the list it means. Anything else is left whole for ``_ids`` to refuse by name."""
    raw = value if isinstance(value, list) else [value]
    entries: list[Any] = []
    for entry in raw:
        if isinstance(entry, str):
            text = entry.strip()
            if text.startswith("[") and text.endswith("]"):
                text = text[1:-1]
            entries += [part for part in ID_SEPARATORS.split(text) if part]
        else:
            entries.append(entry)
    return entries


def _ids(value: Any, *, team: bool = False) -> list[int | str]:
    """Memory ids; with ``team`` also a team server's, kept as ``team#12`` (remote mode's search shows them)."""
    from memcairn.wire.team_client import team_id, team_ref

    out: list[int | str] = []
    for entry in _id_entries(value):
        held = team_id(entry)
        if held is not None:
            if not team:
                raise ToolError(f"{shown(entry)} is a team server's memory; this tool takes local ids (#12)")
            out.append(team_ref(held))
            continue
        number = whole(entry.lstrip("#") if isinstance(entry, str) else entry)
        if number is None or number < 1:
            raise ToolError(f"ids must be memory ids (whole numbers such as 12), got {shown(entry)}; "
                            "call search first to find ids")
        out.append(number)
    if not out:  # text of separators only, such as " , "
        raise ToolError(IDS_REQUIRED)
    if len(out) > MAX_IDS:
        raise ToolError(f"at most {MAX_IDS} ids per call; narrow the list down with search or timeline first")
    return list(dict.fromkeys(out))


def _one_id(value: Any) -> int:
    found = _ids(value)
    if len(found) != 1:
        raise ToolError(f"one memory id is asked for here (such as 12), got {shown(value)}")
    return int(found[0])


# The readers below raise ``ToolError``, which pydantic lets through unwrapped: its text is the agent's answer.
def _as_text(value: Any, info: ValidationInfo) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = whole(value)  # an id given as a number where text is expected: 12.0 reads as "12"
        value = str(value if number is None else number)
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)  # a list where comma-separated text is expected
    if not isinstance(value, str):
        raise ToolError(f"{info.field_name} must be text, got {shown(value)}")
    return value


def _as_whole(value: Any, info: ValidationInfo) -> int:
    number = whole(value)
    if number is None:
        raise ToolError(f"{info.field_name} must be a whole number, got {shown(value)}")
    return number


def _as_score(value: Any, info: ValidationInfo) -> float:
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise ToolError(f"{info.field_name} must be a number, got {shown(value)}") from None
    if isinstance(number, bool) or not isinstance(number, int | float) or not 0 <= number < float("inf"):
        raise ToolError(f"{info.field_name} must be a number >= 0, got {shown(value)}")
    return number


def _as_flag(value: Any, info: ValidationInfo) -> bool:
    if not isinstance(value, bool):
        raise ToolError(f"{info.field_name} must be true or false, got {shown(value)}")
    return value


TEXT = BeforeValidator(_as_text)
WHOLE = BeforeValidator(_as_whole)
LOCAL_IDS = BeforeValidator(lambda value: _ids(value))
LOCAL_ID = BeforeValidator(lambda value: value if value is None else _one_id(value))
READ_IDS = BeforeValidator(lambda value: _ids(value, team=True))

Project = Annotated[str | None, TEXT,
                    Field(description='Default: the current project; "*" = all; comma-separated for several.')]
PlatformSource = Annotated[str | None, TEXT, Field(description="claude-code, codex or gemini-cli.")]


# -- the tools ------------------------------------------------------------------------------------------
def tool(description: str, *, read_only: bool, destructive: bool = False) -> Callable[[Callable[..., str]],
                                                                                       Callable[..., str]]:
    """Marks a ``MemoryTools`` method as a tool, with its description and hints (``tools/list`` shows them).

    Descriptions are kept short on purpose: every session that loads the server pays for them
    (``important_workflow``'s result carries the longer guidance, on demand)."""

    def mark(method: Callable[..., str]) -> Callable[..., str]:
        method.tool = {"description": description, "read_only": read_only, "destructive": destructive}  # type: ignore[attr-defined]
        return method

    return mark


def default_identity(environ: Mapping[str, str] | None = None, cwd: str | None = None) -> ProjectIdentity:
    """The project a tool call without ``project`` works on (see ``memcairn.mcp.server``)."""
    env = os.environ if environ is None else environ
    root = env.get("CLAUDE_PROJECT_DIR") or env.get("GEMINI_PROJECT_DIR") or cwd or os.getcwd()
    return project_from_cwd(root)


def _local_tz() -> str:
    """This process's zone (the agent's), so the worker reads dates and prints times as the agent would."""
    from memcairn.search.request import local_tz_name

    return local_tz_name()


def _next_offset(offset: int | None, limit: int | None, rows: int) -> int | None:
    """The offset of the next page of a search that returned ``rows`` rows, when that page was full (the index
    does not say whether more match); None otherwise, or when the next page lies past the largest offset.
    The offset and limit are taken as the worker applies them: clamped, the default when absent."""
    from memcairn.search.request import DEFAULT_LIMIT, MAX_LIMIT, MAX_OFFSET, MIN_LIMIT  # late, as in _local_tz

    offset = min(max(0, offset or 0), MAX_OFFSET)
    limit = min(max(MIN_LIMIT, DEFAULT_LIMIT if limit is None else limit), MAX_LIMIT)
    return offset + limit if rows >= limit and offset + limit <= MAX_OFFSET else None


def _split(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


class MemoryTools:
    """One method per tool (see the module docstring): checked arguments in, text out; errors raise."""

    def __init__(self, gateway: WorkerGateway | None = None, identity: ProjectIdentity | None = None) -> None:
        self.gateway = gateway or WorkerGateway()
        self.identity = identity or default_identity()

    def _projects(self, value: str | None) -> list[str] | None:
        """Projects to filter on: the default chain when none given, None (every project) for ``*``."""
        names = _split(value or "")
        if not names:  # none, or only commas and spaces: the default, not every project
            return list(self.identity.chain)
        return None if ALL_PROJECTS in names else names

    @tool("Read once before using memory: search -> timeline -> get_observations, cheapest first.", read_only=True)
    def important_workflow(self) -> str:
        return WORKFLOW

    @tool("Step 1. Search past work: one row per memory (#id, time, type, title, ~tokens to read it). Weak matches "
          "are hidden. No query: newest first.", read_only=True)
    def search(
        self,
        query: Annotated[str | None, TEXT, Field(description="Keywords or a question.")] = None,
        limit: Annotated[int | None, WHOLE, Field(description="Rows, 1-100 (default 20).")] = None,
        offset: Annotated[int | None, WHOLE, Field(description="Rows to skip.")] = None,
        project: Project = None,
        kind: Annotated[Literal["observations", "summaries", "prompts", "all"] | None, TEXT,
                        Field(description="Record kind.")] = None,
        type: Annotated[str | None, TEXT,  # shadows the builtin: the argument's name over MCP and HTTP
                        Field(description="decision, bugfix, feature, change, discovery...")] = None,
        concepts: Annotated[str | None, TEXT, Field(description="Comma-separated.")] = None,
        files: Annotated[str | None, TEXT, Field(description="Path parts, comma-separated.")] = None,
        date_start: Annotated[str | None, TEXT, Field(description=f"From: {DATE_FORMS}.")] = None,
        date_end: Annotated[str | None, TEXT, Field(description="Until (same forms).")] = None,
        order_by: Annotated[Literal["relevance", "newest", "oldest"] | None, TEXT,
                            Field(description="Default: relevance with a query.")] = None,
        platform_source: PlatformSource = None,
        min_score: Annotated[float | None, BeforeValidator(_as_score),
                             Field(description="Relevance floor: 0.75 default, 0 shows all.")] = None,
        stale: Annotated[bool | None, BeforeValidator(_as_flag),
                         Field(description="Instead: memories the code contradicts now.")] = None,
    ) -> str:
        if stale:
            return self._stale(project)
        params = {
            "format": "index", "query": query, "limit": limit, "offset": offset, "project": self._projects(project),
            "kind": KINDS[kind or "all"], "type": type, "concepts": concepts, "files": files,
            "dateStart": date_start, "dateEnd": date_end, "orderBy": order_by, "platformSource": platform_source,
            "tz": _local_tz(), "min_score": min_score,
        }
        answer = self.gateway.call(lambda c: c.get_json("/api/search", params))
        text = str(answer.get("text", ""))
        rows = sum((answer.get("counts") or {}).values())
        following = _next_offset(offset, limit, rows)
        if following is not None:
            text += f"(a full page: more may match; call search again with offset {following})\n"
        if project is None and not rows and not offset:  # past the last page: not the project
            text += (f"(searched project {', '.join(self.identity.chain)}, the current one; "
                     'pass project "*" to search every project)\n')
        return text

    def _stale(self, project: str | None) -> str:
        """The memories the code no longer supports (``GET /api/stale``), with the call that forgets them: a
        search flag rather than a tool of its own, since every session pays for each tool's definition."""
        from memcairn.context.stale import render_text

        answer = self.gateway.call(lambda c: c.get_json("/api/stale", {"project": self._projects(project)}))
        return render_text(answer, forget_hint='Forget them: forget {{"ids": {ids_json}}}; or correct one: '
                                               '{{"id": N, "why": "...", "by": NEWER_ID}}.')

    @tool("Step 2. Memories just before and after an anchor.", read_only=True)
    def timeline(
        self,
        anchor: Annotated[str | None, TEXT, Field(
            description=f"An id (12, team#12), S<id> for a summary, or a time: {DATE_FORMS}.")] = None,
        query: Annotated[str | None, TEXT, Field(description="Anchor on its best match instead.")] = None,
        before: Annotated[int | None, WHOLE, Field(description="Rows before, 0-50 (default 10).")] = None,
        after: Annotated[int | None, WHOLE, Field(description="Rows after (default 10).")] = None,
        project: Annotated[str | None, TEXT,
                           Field(description="Default: the anchor's project, else the current one.")] = None,
    ) -> str:
        if anchor is not None and query is not None:
            raise ToolError("give anchor or query, not both")
        if anchor is None and query is None:
            raise ToolError("give anchor (an id from search, e.g. 12) or query (its best match becomes the anchor)")
        digits = anchor.strip().lstrip("#Ss") if anchor is not None else ""
        anchor_id = whole(digits) if digits.isdecimal() else None
        if project is not None:
            projects = self._projects(project)
        elif anchor_id is not None:
            projects = self._anchor_project(anchor_id)
        else:
            projects = list(self.identity.chain)
        params = {"format": "index", "anchor": anchor, "query": query, "before": before, "after": after,
                  "project": projects, "tz": _local_tz()}
        answer = self.gateway.call(lambda c: c.get_json("/api/timeline", params))
        return str(answer.get("text", ""))

    def _anchor_project(self, item_id: int) -> list[str] | None:
        """The anchor's own project; None (no filter) when it does not exist: the timeline then says so."""
        try:
            item = self.gateway.call(lambda c: c.get_json(f"/api/memory/{item_id}"))
        except NotFoundError:
            return None
        return [item["project"]] if isinstance(item, dict) and item.get("project") else None

    # ``ids`` is required, so full records cannot be fetched without filtering first. A team server's ids (remote
    # mode) come as text, "team#12": the items' schema says so, or a client that checks arguments would refuse them.
    @tool("Step 3. Full records of the few ids worth reading (each costs the ~tokens on its row).", read_only=True)
    def get_observations(
        self,
        ids: Annotated[list[int | Annotated[str, Field(pattern=r"^(#?\d+|team#\d+)$")]], READ_IDS, Field(
            min_length=1, description='Ids, e.g. [12, 15]; a team server\'s as text: ["team#12"].')],
    ) -> str:
        body = {"ids": ids, "format": "agent", "tz": _local_tz()}
        answer = self.gateway.call(lambda c: c.post_json("/api/observations/batch", body))
        items: list[dict[str, Any]] = []
        truncated: list[Any] = []
        left: list[Any] = []
        size = 0
        for raw in answer.get("items", []):
            if left:  # kept in order: the rest go to the next call
                left.append(raw.get("id"))
                continue
            record, cut = bounded(compact(raw))
            cost = len(dumps(record, ensure_ascii=False))
            if items and size + cost > MAX_RECORDS_CHARS:
                left.append(record.get("id"))
                continue
            items.append(record)
            size += cost
            if cut:
                truncated.append(record.get("id"))
        out: dict[str, Any] = {"items": items}
        notes: list[str] = []
        if answer.get("missing"):
            out["missing"] = answer["missing"]
            notes.append("no memory has the missing ids; they may have been deleted")
        if truncated:
            out["truncated"] = truncated
            notes.append(f"the truncated ids were cut where marked (texts past {MAX_FIELD_CHARS:,} characters, lists "
                         f"past {MAX_ENTRIES} entries, a record past {MAX_RECORDS_CHARS:,} characters); the stored "
                         f"memories are whole: `{SHOW_IN_FULL.format(id=truncated[0])}` prints one in full")
        if left:
            out["not_included"] = left
            notes.append(f"the records passed {MAX_RECORDS_CHARS:,} characters; call get_observations again with "
                         "the not_included ids")
        if notes:
            out["note"] = "; ".join(notes)
        return dumps(out, ensure_ascii=False)

    def hooks_heard(self) -> list[str]:
        """The agents whose hooks reached the worker this week (``/api/stats``)."""
        return list(self.gateway.call(lambda c: c.get_json("/api/stats")).get("hooks_heard") or [])

    @tool("The digest injected at session start, for clients without hooks.", read_only=True)
    def session_start_context(
        self,
        project: Project = None,
        platform_source: PlatformSource = None,
        full: Annotated[bool | None, BeforeValidator(_as_flag), Field(description="Not the compact rendering.")
                        ] = None,
    ) -> str:
        params = {"project": self._projects(project), "platformSource": platform_source,
                  "full": "true" if full else None, "tz": _local_tz()}
        # POST: the context reaches the agent, so the capture notices in it count as shown (as at SessionStart)
        text = self.gateway.call(lambda c: c.post_text("/api/context/inject", params))
        return text if text.strip() else NO_CONTEXT

    @tool("Remember something for later sessions (a decision, a gotcha, a fact).", read_only=False)
    def save_memory(
        self,
        text: Annotated[str, TEXT, Field(description="Self-contained text.")],
        title: Annotated[str | None, TEXT, Field(description="Short title.")] = None,
        type: Annotated[str | None, TEXT,  # shadows the builtin: the argument's name over MCP and HTTP
                        Field(description="decision, bugfix, note (default)...")] = None,
        project: Annotated[str | None, TEXT, Field(description="Default: the current project.")] = None,
    ) -> str:
        if not text.strip():
            raise ToolError("text is required: the memory to save, as self-contained text")
        name = (project or "").strip() or self.identity.name  # stored without the spaces
        if name == ALL_PROJECTS:
            raise ToolError('a memory belongs to one project; give its name instead of "*"')
        if "," in name:  # search would read it as several projects and never find the memory
            raise ToolError(f"a memory belongs to one project; give one name, not a list ({name!r})")
        body = {"text": text, "title": title, "type": type, "project": name}
        answer = self.gateway.call(lambda c: c.post_json("/api/memory/save", {k: v for k, v in body.items()
                                                                                if v is not None}))
        if answer.get("created"):
            return f"Saved as #{answer['id']} in project {name}."
        return f"Already saved as #{answer['id']} in project {name}; nothing changed."

    @tool("Delete memories by id for good (wrong, outdated or sensitive).", read_only=False, destructive=True)
    def forget(
        self,
        ids: Annotated[list[int], LOCAL_IDS, Field(min_length=1, description="Ids, e.g. [12, 15].")],
    ) -> str:
        deleted: list[int] = []
        missing: list[int] = []
        for item_id in ids:
            try:
                self.gateway.call(lambda c, i=item_id: c.delete(f"/api/memory/{i}"))
                deleted.append(item_id)
            except NotFoundError:
                missing.append(item_id)
        parts = []
        if deleted:
            parts.append("Deleted " + ", ".join(f"#{i}" for i in deleted) + ".")
        if missing:
            parts.append("No memory with id " + ", ".join(f"#{i}" for i in missing) + " (nothing to delete).")
        return " ".join(parts)

    @tool("Mark a memory wrong or superseded by a newer one; it is kept, out of the context.", read_only=False)
    def correct(
        self,
        id: Annotated[int, LOCAL_ID, Field(description="Its id, e.g. 12.")],
        why: Annotated[str | None, TEXT, Field(description="Why it is wrong.")] = None,
        by: Annotated[int | None, LOCAL_ID, Field(description="The newer memory's id.")] = None,
        undo: Annotated[bool, BeforeValidator(_as_flag), Field(description="Take it back.")] = False,
    ) -> str:
        if undo and (why or by is not None):
            raise ToolError("undo takes back the correction in effect: give it alone, without why or by")
        if not undo and not (why or "").strip() and by is None:
            raise ToolError("say why the memory is wrong (why), or which memory supersedes it (by)")
        body: dict[str, Any] = {"undo": True} if undo else {"why": why, "by": by}
        record = self.gateway.call(lambda c: c.post_json(f"/api/memory/{id}/correct", body))
        if undo:
            return f"#{id} holds again."
        said = (record.get("freshness") or {}).get("reasons") or [f"marked {record.get('correction', {}).get('state')}"]
        return f"#{id} {said[0]}: it stays readable by id, leaves the session context and ranks below others."

    def run(self, name: str, arguments: Mapping[str, Any] | None) -> str:
        """Check the arguments and run one tool (blocking). Raises ``ToolError`` or a ``MemcairnError``."""
        if name not in TOOL_NAMES:
            raise ToolError(f"no tool named {name!r}; the tools are: {', '.join(TOOL_NAMES)}")
        return getattr(self, name)(**checked_arguments(name, arguments))


TOOL_NAMES = tuple(name for name, member in vars(MemoryTools).items() if hasattr(member, "tool"))


# -- checking a call's arguments ------------------------------------------------------------------------
@cache
def arguments_model(name: str) -> type[BaseModel]:
    """The pydantic model of tool ``name``'s arguments, from its method's signature as ``func_metadata`` makes
    it (``tests/test_mcp_schema.py`` holds the two to one schema)."""
    fields: dict[str, Any] = {}
    for param in inspect.signature(getattr(MemoryTools, name), eval_str=True).parameters.values():
        if param.name != "self":
            fields[param.name] = param.annotation if param.default is param.empty else (param.annotation,
                                                                                          param.default)
    return create_model(f"{name}Arguments", **fields)


def _renamed(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with the earlier names of ``ARGUMENT_ALIASES`` read as today's (a given new name wins)."""
    if name == "search" and isinstance(args.get("type"), str) and args["type"] in KINDS:
        args.setdefault("kind", args.pop("type"))  # the kind's name before kind was (type: "observations")
    for old, new in ARGUMENT_ALIASES.get(name, {}).items():
        if old in args:
            value = args.pop(old)
            args.setdefault(new, value)
    return args


def _explained(name: str, error: ArgumentError) -> str:
    """pydantic's refusal, in the words of the readers above: what to send instead."""
    from memcairn.mcp.schema import TOOL_ENTRIES

    problem = error.errors()[0]
    field = str(problem["loc"][0]) if problem["loc"] else ""
    schema = next(t["inputSchema"] for t in TOOL_ENTRIES if t["name"] == name)["properties"].get(field, {})
    if problem["type"] == "missing":
        return IDS_REQUIRED if field == "ids" else f"{field} is required: {schema.get('description', '')}"
    if "enum" in schema:
        return f"{field} must be one of {', '.join(schema['enum'])}; got {problem['input']!r}"
    return f"{field}: {problem['msg']}, got {shown(problem['input'])}"


def checked_arguments(name: str, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments given to tool ``name`` as its method's keywords (``null`` dropped), or a ``ToolError``."""
    args = _renamed(name, {k: v for k, v in (arguments or {}).items() if v is not None})
    model = arguments_model(name)
    unknown = sorted(set(args) - set(model.model_fields))
    if unknown:
        accepted = ", ".join(model.model_fields) or "none"
        raise ToolError(f"{name} does not take {', '.join(unknown)}; its arguments are: {accepted}")
    try:
        checked = model.model_validate(args)
    except ArgumentError as exc:
        raise ToolError(_explained(name, exc)) from None
    values = {field: getattr(checked, field) for field in args}
    if name in URL_TOOLS:
        sizes = {n: len(v) for n, v in values.items() if isinstance(v, str)}
        if sum(sizes.values()) > MAX_URL_ARG_CHARS:
            longest = max(sizes, key=lambda n: sizes[n])
            raise ToolError(f"{name} takes at most {MAX_URL_ARG_CHARS:,} characters of arguments in all; "
                            f"{longest} alone is {sizes[longest]:,}: shorten it")
    return values


# -- the schema tools/list shows ------------------------------------------------------------------------
def _slim(schema: Any) -> Any:
    """pydantic's schema without what costs tokens and says nothing: titles, ``default: null``, and the ``null``
    branch of an optional argument (a missing argument says it; one JSON type keeps strict clients happy)."""
    if isinstance(schema, list):
        return [_slim(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _slim(v) for k, v in schema.items() if k != "title" and not (k == "default" and v is None)}
    branches = out.get("anyOf")
    if isinstance(branches, list) and {"type": "null"} in branches:
        rest = [b for b in branches if b != {"type": "null"}]
        del out["anyOf"]
        out = {**(rest[0] if len(rest) == 1 else {"anyOf": rest}), **out}
    if isinstance(out.get("properties"), dict):  # the argument names, not a schema's keywords
        out["properties"] = {k: _slim(v) for k, v in schema["properties"].items()}
    return out


def tool_entries() -> list[dict[str, Any]]:
    """The tools as ``tools/list`` entries, their input schemas made by the MCP SDK's ``func_metadata`` (the SDK
    is needed: the tests and ``python -m memcairn.mcp.tools`` run this, the server reads ``memcairn.mcp.schema``)."""
    from mcp.server.mcpserver.utilities.func_metadata import func_metadata

    entries = []
    for name in TOOL_NAMES:
        method = getattr(MemoryTools, name)
        hints = method.tool
        annotations: dict[str, Any] = {"readOnlyHint": hints["read_only"]}
        if not hints["read_only"]:
            annotations |= {"destructiveHint": hints["destructive"], "idempotentHint": True}
        model = func_metadata(method, skip_names=("self",), structured_output=False).arg_model
        schema = model.model_json_schema(by_alias=True)
        entries.append({"name": name, "description": hints["description"], "inputSchema": _slim(schema),
                        "annotations": annotations})
    return entries


def schema_module() -> str:
    """The text of ``memcairn/mcp/schema.py``."""
    import pprint

    body = pprint.pformat(tool_entries(), width=116, sort_dicts=False)
    return (f'"""Generated by ``python -m memcairn.mcp.tools`` from the tools\' typed definitions in '
            f'``memcairn.mcp.tools``: do not\nedit. ``tools/list`` answers with it, without importing pydantic."""\n\n'
            f"TOOL_ENTRIES = {body}\n")


if __name__ == "__main__":
    from pathlib import Path

    Path(__file__).with_name("schema.py").write_text(schema_module(), encoding="utf-8")
