"""``memcairn mcp`` end to end: the SDK's own stdio client spawns the console script, which talks to a real
worker on a free loopback port; plus in-process checks of argument and error handling, and the server's
exit when its client or its parent goes away."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp_helpers import IDENTITY, MEMCAIRN, processes_with, start_worker, text_of, worker_env
from mcp_helpers import BatchClient as _BatchClient
from mcp_helpers import call_in_process as _call_in_process
from mcp_helpers import recorded as _recorded

from memcairn.core.errors import WorkerError, WorkerUnavailableError
from memcairn.core.tokens import estimate_tokens
from memcairn.mcp.schema import TOOL_ENTRIES
from memcairn.mcp.server import WORKFLOW, WorkerGateway
from memcairn.mcp.tools import MemoryTools, default_identity
from memcairn.wire import lifecycle
from memcairn.wire.client import WorkerClient
from memcairn.wire.config import load_settings

pytestmark = pytest.mark.skipif(not Path("/proc/self").exists(), reason="process checks read /proc")

READ_ONLY = {"important_workflow", "search", "timeline", "get_observations", "session_start_context"}


def wait_for(predicate: Any, timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def env(isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    yield from worker_env(isolated_home, monkeypatch)


@pytest.fixture
def worker(env: dict[str, str]) -> WorkerClient:
    return start_worker(env)


async def _session_flow(env: dict[str, str], cwd: Path, worker: WorkerClient, errlog: Any) -> dict[str, Any]:
    params = StdioServerParameters(command=MEMCAIRN, args=["mcp"], env=env, cwd=str(cwd))
    seen: dict[str, Any] = {}
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        seen["server"] = init.server_info.name
        seen["instructions"] = init.instructions
        seen["tools"] = (await session.list_tools()).tools

        async def call(name: str, arguments: dict[str, Any] | None = None) -> tuple[bool, str]:
            result = await session.call_tool(name, arguments or {})
            return result.is_error, text_of(result)

        seen["workflow"] = await call("important_workflow")
        seen["saved"] = await call("save_memory", {"title": "Token refresh uses UTC", "type": "decision",
                                                   "text": "The auth service compares token expiry in UTC; "
                                                           "local time broke refresh near midnight."})
        seen["saved_again"] = await call("save_memory", {"title": "Token refresh uses UTC", "type": "decision",
                                                         "text": "The auth service compares token expiry in UTC; "
                                                                 "local time broke refresh near midnight."})
        seen["neighbour"] = await call("save_memory", {"title": "Cache warms at boot", "text": "The cache is "
                                                       "filled when the service starts.", "type": "discovery"})
        seen["elsewhere"] = await call("save_memory", {"title": "Other repo note", "text": "token expiry elsewhere",
                                                       "project": "other-proj"})
        item_id = int(re.search(r"#(\d+)", seen["saved"][1]).group(1))
        seen["id"] = item_id
        seen["search"] = await call("search", {"query": "token expiry refresh"})
        seen["search_other"] = await call("search", {"query": "token expiry", "project": "other-proj"})
        seen["search_all"] = await call("search", {"query": "token expiry", "project": "*", "limit": 10})
        seen["search_notes"] = await call("search", {"kind": "observations", "type": "decision"})
        seen["search_notes_before"] = await call("search", {"type": "observations", "obs_type": "decision"})
        seen["search_nothing"] = await call("search", {"dateEnd": "2001-01-01"})
        seen["timeline"] = await call("timeline", {"anchor": str(item_id), "depth_before": 3, "depth_after": 3})
        seen["timeline_int"] = await call("timeline", {"anchor": item_id})
        seen["timeline_query"] = await call("timeline", {"query": "cache boot"})
        seen["full"] = await call("get_observations", {"ids": [item_id]})
        seen["record"] = worker.get_json(f"/api/memory/{item_id}")
        seen["no_ids"] = await call("get_observations", {"ids": []})
        seen["missing_ids"] = await call("get_observations", {})
        seen["bad_kind"] = await call("search", {"kind": "everything"})
        seen["bad_anchor"] = await call("timeline", {"anchor": "soon-ish"})
        seen["unknown_id"] = await call("timeline", {"anchor": "999999"})
        seen["context"] = await call("session_start_context")
        seen["context_expected"] = worker.get_text("/api/context/inject", {"projects": [cwd.name]})
        seen["context_other"] = await call("session_start_context", {"project": "other-proj", "full": True})
        seen["context_other_expected"] = worker.get_text("/api/context/inject",
                                                         {"projects": ["other-proj"], "full": "true"})
        seen["forget"] = await call("forget", {"ids": [item_id, 999999]})
        seen["after_forget"] = await call("get_observations", {"ids": [item_id]})
        seen["search_after_forget"] = await call("search", {"query": "token expiry refresh"})
        seen["mcp_pids"] = processes_with(Path(env["MEMCAIRN_HOME"]), b"mcp")
    return seen


def test_a_full_session_over_stdio_against_a_real_worker(env: dict[str, str], worker: WorkerClient,
                                                         tmp_path: Path) -> None:
    cwd = tmp_path / "e2e-proj"
    cwd.mkdir()
    with open(tmp_path / "mcp-stderr.log", "w") as errlog:
        seen = anyio.run(_session_flow, env, cwd, worker, errlog)
    stderr = (tmp_path / "mcp-stderr.log").read_text()

    assert seen["server"] == "memcairn" and "search" in seen["instructions"]
    tools = {t.name: t for t in seen["tools"]}
    assert list(tools) == [t["name"] for t in TOOL_ENTRIES] == [
        "important_workflow", "search", "timeline", "get_observations", "session_start_context", "save_memory",
        "forget", "correct"]
    ids_schema = tools["get_observations"].input_schema
    assert ids_schema["required"] == ["ids"]
    assert ids_schema["properties"]["ids"]["type"] == "array" and ids_schema["properties"]["ids"]["minItems"] == 1
    # a client that checks arguments against the schema lets a team server's ids through (remote mode)
    jsonschema.validate({"ids": [12, "#3", "team#15"]}, ids_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"ids": ["twelve"]}, ids_schema)
    assert tools["forget"].input_schema["properties"]["ids"]["items"] == {"type": "integer"}  # local ids only
    assert tools["forget"].input_schema["required"] == ["ids"] and tools["save_memory"].input_schema["required"] == [
        "text"]
    assert set(tools["search"].input_schema["properties"]) == {
        "query", "limit", "offset", "project", "kind", "type", "concepts", "files", "date_start", "date_end",
        "order_by", "platform_source", "min_score", "stale"}
    assert tools["search"].input_schema["properties"]["kind"]["enum"] == ["observations", "summaries", "prompts", "all"]
    assert set(tools["timeline"].input_schema["properties"]) == {"anchor", "query", "before", "after", "project"}
    for name, tool in tools.items():
        assert tool.annotations.read_only_hint is (name in READ_ONLY), name
        assert tool.input_schema["type"] == "object"
    assert tools["forget"].annotations.destructive_hint is True
    assert tools["save_memory"].annotations.destructive_hint is False
    workflow = tools["important_workflow"].description
    assert all(w in workflow for w in ("search", "timeline", "get_observations"))
    assert all(w in WORKFLOW for w in ("20-30 tokens", "median 166", "7 times", "min_score=0"))

    assert seen["workflow"] == (False, WORKFLOW)
    item_id = seen["id"]
    assert seen["saved"] == (False, f"Saved as #{item_id} in project e2e-proj.")
    assert seen["saved_again"] == (False, f"Already saved as #{item_id} in project e2e-proj; nothing changed.")
    assert not seen["neighbour"][0] and seen["elsewhere"] == (False, seen["elsewhere"][1])
    assert "in project other-proj" in seen["elsewhere"][1]

    error, text = seen["search"]
    assert not error and f"#{item_id}" in text and "Token refresh uses UTC" in text and "Other repo note" not in text
    error, text = seen["search_other"]
    assert not error and "Other repo note" in text and f"#{item_id} " not in text
    error, text = seen["search_all"]
    assert not error and "Other repo note" in text and "Token refresh uses UTC" in text
    for key in ("search_notes", "search_notes_before"):  # kind and type, or the spellings from before
        error, text = seen[key]
        assert not error and "Token refresh uses UTC" in text and "Cache warms at boot" not in text, key
    error, text = seen["search_nothing"]
    assert not error and 'pass project "*"' in text and "e2e-proj" in text

    error, text = seen["timeline"]
    assert not error and text.startswith(f"Timeline around #{item_id}") and "Cache warms at boot" in text
    assert "Other repo note" not in text  # the anchor's own project only
    assert seen["timeline_int"][1].startswith(f"Timeline around #{item_id}")
    assert not seen["timeline_query"][0] and "Cache warms at boot" in seen["timeline_query"][1]

    error, text = seen["full"]
    assert not error
    full = json.loads(text)
    (record,) = full["items"]
    stored = seen["record"]  # the HTTP API's raw record keeps everything; the agent's drops what it cannot use
    assert {"uuid", "content_hash", "created_at_epoch", "updated_at_epoch"} <= set(stored)
    assert not {"uuid", "content_hash", "created_at_epoch", "updated_at_epoch", "metadata"} & set(record)
    assert record == {k: v for k, v in stored.items() if k in record and k != "time"} | {"time": record["time"]}
    assert datetime.fromisoformat(record["time"]).timestamp() == stored["created_at_epoch"] // 1000
    assert all(v not in (None, "", [], {}) for v in record.values())
    # the ~N tok beside the index row is what this record costs in the get_observations answer
    row = next(line for line in seen["search"][1].splitlines() if line.startswith(f"- #{item_id} "))
    shown = int(re.search(r"~(\d+) tok", row).group(1))
    paid = estimate_tokens(json.dumps(record, ensure_ascii=False))
    assert abs(shown - paid) <= 0.15 * paid, (shown, paid)
    assert full["items"][0]["text"].startswith("The auth service compares token expiry in UTC")

    for key in ("no_ids", "missing_ids"):
        error, text = seen[key]
        assert error and text.startswith("ids is required: call search first"), key
    error, text = seen["bad_kind"]
    assert error and "kind must be one of observations, summaries, prompts, all; got 'everything'" in text
    error, text = seen["bad_anchor"]
    assert error and text.startswith("invalid request: anchor 'soon-ish' is not understood")
    error, text = seen["unknown_id"]
    assert error and "999999" in text and "search first" in text

    assert seen["context"] == (False, seen["context_expected"])
    assert "Token refresh uses UTC" in seen["context_expected"]
    assert seen["context_other"] == (False, seen["context_other_expected"])

    assert seen["forget"] == (False, f"Deleted #{item_id}. No memory with id #999999 (nothing to delete).")
    error, text = seen["after_forget"]
    assert not error and json.loads(text)["items"] == [] and json.loads(text)["missing"] == [item_id]
    assert f"#{item_id} " not in seen["search_after_forget"][1]

    assert len(seen["mcp_pids"]) == 1
    wait_for(lambda: not processes_with(Path(env["MEMCAIRN_HOME"]), b"mcp"), what="the server to exit")
    assert "Traceback" not in stderr, stderr


async def _first_call_starts_the_worker(env: dict[str, str], cwd: Path) -> tuple[bool, str]:
    params = StdioServerParameters(command=MEMCAIRN, args=["mcp"], env=env, cwd=str(cwd))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("save_memory", {"text": "started on demand"})
        return result.is_error, text_of(result)


def test_the_first_tool_call_starts_the_worker(env: dict[str, str], tmp_path: Path) -> None:
    cfg = load_settings()
    assert lifecycle.probe(cfg) is None
    error, text = anyio.run(_first_call_starts_the_worker, env, tmp_path)
    assert not error and text.startswith("Saved as #") and text.endswith(f"in project {tmp_path.name}.")
    assert lifecycle.probe(cfg) is not None  # it outlives the MCP server, like any worker


def test_the_server_exits_when_stdin_closes(env: dict[str, str], tmp_path: Path) -> None:
    with subprocess.Popen([MEMCAIRN, "mcp"], env={**os.environ, **env}, cwd=tmp_path, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        try:
            hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(hello).encode() + b"\n")
            proc.stdin.flush()
            answer = json.loads(proc.stdout.readline())
            assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "memcairn"
            proc.stdin.close()
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert lifecycle.probe(load_settings()) is None  # nothing asked for the worker, so none was started


ORPHAN = """
import subprocess, sys
stdin, stdout = int(sys.argv[2]), int(sys.argv[3])
child = subprocess.Popen([sys.argv[1], "mcp"], stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL,
                         pass_fds=[stdin, stdout])
print(child.pid, flush=True)
sys.stdin.readline()  # exit (orphaning the server) when told to
"""


def test_the_server_exits_when_its_parent_dies_even_with_stdin_open(env: dict[str, str], tmp_path: Path) -> None:
    in_read, in_write = os.pipe()  # the test keeps in_write open: the server's stdin never reaches end of file
    out_read, out_write = os.pipe()
    try:
        with subprocess.Popen([sys.executable, "-c", ORPHAN, MEMCAIRN, str(in_read), str(out_write)],
                              env={**os.environ, **env}, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, pass_fds=[in_read, out_write]) as parent:
            assert parent.stdin is not None and parent.stdout is not None
            pid = int(parent.stdout.readline())
            hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            os.write(in_write, json.dumps(hello).encode() + b"\n")
            with os.fdopen(os.dup(out_read), "rb") as answers:  # the server is up (and watching its parent)
                assert json.loads(answers.readline())["id"] == 1
            parent.stdin.close()
            assert parent.wait(timeout=10) == 0

        def gone() -> bool:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                return True
            return state == "Z"

        wait_for(gone, timeout=20, what="the orphaned server to exit")
    finally:
        for fd in (in_read, in_write, out_read, out_write):
            os.close(fd)


# -- in process: arguments and errors without a worker ---------------------------------------------
def _unavailable() -> WorkerClient:
    raise WorkerUnavailableError("no memcairn worker answered at http://127.0.0.1:9 (connection refused)")




@pytest.mark.parametrize(("name", "arguments", "expected"), [
    ("search", {"query": "x"}, "the memory worker is not running and could not be started: run `memcairn worker "
                               "start` and try again (no memcairn worker answered"),
    ("get_observations", {"ids": []}, "ids is required: call search first to find ids"),
    ("get_observations", {"ids": ["twelve"]}, 'ids must be memory ids (whole numbers such as 12), got "twelve"'),
    ("forget", {}, "ids is required: call search first to find ids"),
    ("search", {"query": "x", "projects": "a"}, "search does not take projects; its arguments are: query, limit"),
    ("search", {"limit": "many"}, 'limit must be a whole number, got "many"'),
    ("timeline", {}, "give anchor (an id from search, e.g. 12) or query"),
    ("timeline", {"anchor": "12", "query": "x"}, "give anchor or query, not both"),
    ("save_memory", {"text": "  "}, "text is required: the memory to save"),
    ("save_memory", {"text": "x", "project": "*"}, 'a memory belongs to one project; give its name instead of "*"'),
    ("session_start_context", {"full": "yes"}, 'full must be true or false, got "yes"'),
    ("no_such_tool", {}, "no tool named 'no_such_tool'; the tools are: important_workflow, search"),
    # text that passes ``isdigit`` but not ``int``: a tool error, not "unexpected error in memcairn mcp"
    ("search", {"limit": "--5"}, 'limit must be a whole number, got "--5"'),
    ("search", {"limit": "²"}, 'limit must be a whole number, got "²"'),
    ("get_observations", {"ids": ["²"]}, 'ids must be memory ids (whole numbers such as 12), got "²"'),
    ("timeline", {"anchor": "²"}, "the memory worker is not running"),
    ("timeline", {"anchor": "9" * 5_000}, "the memory worker is not running"),
])
def test_bad_calls_come_back_as_tool_errors_the_agent_can_act_on(name: str, arguments: dict[str, Any],
                                                                  expected: str) -> None:
    tools = MemoryTools(WorkerGateway(_unavailable), IDENTITY)
    error, text = anyio.run(_call_in_process, tools, name, arguments)
    assert error and text.startswith(expected), text


@pytest.mark.parametrize(("name", "arguments", "expected"), [
    ("search", {"query": "q" * 200_000}, "search takes at most 10,000 characters of arguments in all; query alone"),
    ("search", {"files": "é," * 6_000}, "search takes at most 10,000 characters of arguments in all; files alone"),
    ("timeline", {"query": "q" * 200_000}, "timeline takes at most 10,000 characters of arguments in all"),
    ("session_start_context", {"projects": ["p"] * 20_000}, "session_start_context takes at most 10,000 characters"),
    ("save_memory", {"text": "x", "project": "a,b"}, "a memory belongs to one project; give one name, not a list"),
])
def test_oversized_arguments_and_project_lists_are_refused_before_the_worker(name: str, arguments: dict[str, Any],
                                                                             expected: str) -> None:
    """An argument too long for the worker's request line would read as a dead worker (a reset connection)."""
    tools = MemoryTools(WorkerGateway(_unavailable), IDENTITY)
    error, text = anyio.run(_call_in_process, tools, name, arguments)
    assert error and text.startswith(expected), text


def test_a_project_of_only_commas_means_the_current_project_not_every_project() -> None:
    tools = MemoryTools(WorkerGateway(_unavailable), IDENTITY)
    assert tools._projects(",") == tools._projects(" , ") == ["demo"]
    assert tools._projects("*") is None and tools._projects("a,b") == ["a", "b"]


def test_the_workflow_needs_no_worker() -> None:
    tools = MemoryTools(WorkerGateway(_unavailable), IDENTITY)
    assert anyio.run(_call_in_process, tools, "important_workflow", {}) == (False, WORKFLOW)


class _FlakyClient:
    """Answers after the gateway reconnected once, like a worker that was restarted."""

    def __init__(self, log: list[str], dead: bool) -> None:
        self.log, self.dead = log, dead

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        self.log.append(path)
        if self.dead:
            raise WorkerUnavailableError("connection refused")
        return {"text": "1 memory\n", "counts": {"manual": 1}}


def test_a_lost_worker_is_started_again_once() -> None:
    log: list[str] = []
    clients = iter([_FlakyClient(log, dead=True), _FlakyClient(log, dead=False)])
    tools = MemoryTools(WorkerGateway(lambda: next(clients)), IDENTITY)
    assert anyio.run(_call_in_process, tools, "search", {"query": "x"}) == (False, "1 memory\n")
    assert log == ["/api/search", "/api/search"]


def test_a_server_error_is_reported_and_not_retried() -> None:
    """A 500 means the worker answered: starting it again and repeating the call could repeat a write that
    went through (a forget would then say the memory it just deleted does not exist)."""
    calls: list[str] = []

    class Failing:
        def delete(self, path: str) -> Any:
            calls.append(path)
            raise WorkerError("the worker at http://127.0.0.1:9 answered 500 (internal_error): boom")

    tools = MemoryTools(WorkerGateway(lambda: Failing()), IDENTITY)  # type: ignore[arg-type, return-value]
    failed, text = anyio.run(_call_in_process, tools, "forget", {"ids": [12]})
    assert failed and "answered 500" in text and len(calls) == 1


def test_the_default_project_comes_from_claude_project_dir_then_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "launched" / ".git").mkdir(parents=True)
    (tmp_path / "launched" / "sub").mkdir()
    (tmp_path / "cwd-proj").mkdir()
    assert default_identity({"CLAUDE_PROJECT_DIR": str(tmp_path / "launched" / "sub")}).name == "launched"
    assert default_identity({"GEMINI_PROJECT_DIR": str(tmp_path / "launched")}).name == "launched"
    assert default_identity({}, cwd=str(tmp_path / "cwd-proj")).name == "cwd-proj"


def test_every_tool_schema_is_a_closed_object_with_described_properties() -> None:
    for tool in TOOL_ENTRIES:
        assert tool["inputSchema"]["type"] == "object" and tool["description"]
        for name, prop in tool["inputSchema"]["properties"].items():
            assert prop.get("description"), f"{tool['name']}.{name} needs a description"
            assert isinstance(prop.get("type"), str), f"{tool['name']}.{name}: one JSON type keeps strict clients happy"


# -- Codex: the SessionStart context in the server's instructions ---------------------------------------
async def _initialize(env: dict[str, str], cwd: Path, *args: str) -> tuple[str | None, tuple[bool, str]]:
    params = StdioServerParameters(command=MEMCAIRN, args=["mcp", *args], env=env, cwd=str(cwd))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        result = await session.call_tool("session_start_context", {})
        return init.instructions, (bool(result.is_error), text_of(result))


def test_codex_gets_the_session_start_context_in_the_instructions(env: dict[str, str], worker: WorkerClient,
                                                                   tmp_path: Path) -> None:
    """Codex runs hooks only once trusted, so its MCP server announces the context at initialisation."""
    project = tmp_path.name
    worker.post_json("/api/memory/save", {"project": project, "type": "decision", "title": "Sessions expire in UTC",
                                          "text": "Expiry is compared in UTC everywhere."})
    instructions, (error, tool_text) = anyio.run(_initialize, env, tmp_path, "--platform", "codex")
    assert instructions is not None and instructions.startswith(WORKFLOW)
    assert "Sessions expire in UTC" in instructions
    # exactly the text the tool (and the hook) gives, but for the header's clock, which may have moved a minute
    clock = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}")
    assert not error and clock.sub("<now>", tool_text.strip()) in clock.sub("<now>", instructions)

    plain, _ = anyio.run(_initialize, env, tmp_path)
    assert plain == WORKFLOW  # other agents get their context from the SessionStart hook


def test_startup_instructions_without_a_worker_ask_for_the_tool() -> None:
    from memcairn.mcp.server import STARTUP_CONTEXT_MISSING, startup_instructions

    def unreachable() -> WorkerClient:
        raise WorkerUnavailableError("nothing listens on 127.0.0.1:9")

    def slow() -> WorkerClient:
        time.sleep(5)
        raise WorkerUnavailableError("too late")

    tools = MemoryTools(WorkerGateway(unreachable), IDENTITY)
    assert startup_instructions(tools) == f"{WORKFLOW}\n{STARTUP_CONTEXT_MISSING}\n"
    started = time.monotonic()
    tools = MemoryTools(WorkerGateway(slow), IDENTITY)
    assert startup_instructions(tools, timeout=0.3) == f"{WORKFLOW}\n{STARTUP_CONTEXT_MISSING}\n"
    assert time.monotonic() - started < 3  # bounded: the server starts even when the worker is slow


class _SilentClient:
    """Answers the context route as the worker does for an excluded project: with nothing."""

    def post_text(self, path: str, params: dict[str, Any] | None = None, body: Any = None) -> str:
        return ""


def test_an_empty_context_is_explained_and_not_asked_for_again_at_start_up() -> None:
    from memcairn.mcp.server import NO_CONTEXT, STARTUP_CONTEXT_MISSING, startup_instructions

    tools = MemoryTools(WorkerGateway(lambda: _SilentClient()), IDENTITY)  # type: ignore[arg-type, return-value]
    assert anyio.run(_call_in_process, tools, "session_start_context", {}) == (False, NO_CONTEXT)
    instructions = startup_instructions(tools)
    assert NO_CONTEXT in instructions and STARTUP_CONTEXT_MISSING not in instructions


# -- bounded output and a server older than the installed package ----------------------------------------
def test_get_observations_stays_bounded_and_says_what_was_cut() -> None:
    """A saved memory may hold 256 KiB; a hundred of them would flood the agent's context."""
    from memcairn.mcp.records import MAX_FIELD_CHARS, MAX_RECORDS_CHARS

    records = {i: {"id": i, "kind": "manual", "title": f"big {i}", "text": "word " * 50_000,
                   "facts": ["fact " * 4_000]} for i in range(1, 101)}
    records[1] = {"id": 1, "kind": "manual", "title": "small", "text": "short"}
    tools = MemoryTools(WorkerGateway(lambda: _BatchClient(records)), IDENTITY)  # type: ignore[arg-type, return-value]
    error, text = anyio.run(_call_in_process, tools, "get_observations", {"ids": [*range(1, 101)]})
    assert not error and len(text) < MAX_RECORDS_CHARS + 2 * MAX_FIELD_CHARS
    out = json.loads(text)
    shown = [r["id"] for r in out["items"]]
    assert shown[0] == 1 and out["items"][0]["text"] == "short"
    assert shown + out["not_included"] == list(range(1, 101)) and out["truncated"] == shown[1:]
    big = out["items"][1]
    assert big["text"].endswith("… [cut: 242,000 more characters]") and len(big["text"]) < MAX_FIELD_CHARS + 40
    assert big["facts"][0].endswith("[cut: 12,000 more characters]")
    assert "call get_observations again with the not_included ids" in out["note"] and "were cut" in out["note"]

    error, text = anyio.run(_call_in_process, tools, "get_observations", {"ids": [1]})
    assert (error, json.loads(text)) == (False, {"items": [records[1]]})  # a small record is untouched

    records[2] = {"id": 2, "kind": "manual", "text": "short", "metadata": {"raw": "word " * 50_000, "n": 3}}
    error, text = anyio.run(_call_in_process, tools, "get_observations", {"ids": [2]})
    out = json.loads(text)
    assert not error and len(text) < 2 * MAX_FIELD_CHARS and out["truncated"] == [2]  # metadata is cut too
    assert out["items"][0]["metadata"]["raw"].endswith("[cut: 242,000 more characters]")
    assert out["items"][0]["metadata"]["n"] == 3


def test_whole_numbers_sent_as_floats_are_taken_as_the_schema_s_integers() -> None:
    """JSON Schema's "integer" admits 12.0, and some clients send a model's numbers that way."""
    error, _, sent = _recorded("get_observations", {"ids": [12.0, "#13"]})
    assert not error and [(path, body["ids"], body["format"]) for path, body in sent] == [
        ("/api/observations/batch", [12, 13], "agent")]
    error, _, sent = _recorded("search", {"query": "x", "limit": 5.0, "offset": "10"})
    assert not error and (sent[0][1]["limit"], sent[0][1]["offset"]) == (5, 10)
    error, _, sent = _recorded("timeline", {"anchor": 12.0})
    assert not error and sent[-1][1]["anchor"] == "12"
    error, text, _ = _recorded("search", {"limit": 2.5})
    assert error and text == "limit must be a whole number, got 2.5"


@pytest.mark.parametrize(("arguments", "rows", "expected", "absent"), [
    ({"query": "x", "limit": 2}, 2, "(a full page: more may match; call search again with offset 2)", "searched"),
    ({"query": "x", "limit": 2, "offset": 4}, 2, "call search again with offset 6", "searched"),
    ({"query": "x"}, 20, "call search again with offset 20", "searched"),  # the default limit
    ({"query": "x"}, 3, "3 memories", "full page"),
    ({"query": "x", "limit": 100, "offset": 1000}, 100, "100 memories", "full page"),  # no page past the largest
    ({"query": "x"}, 0, 'searched project demo, the current one; pass project "*"', "full page"),
    ({"query": "x", "offset": 40}, 0, "0 memories", "searched project"),  # past the last page: not the project
])
def test_search_says_when_a_page_is_full_and_blames_the_project_only_on_the_first_page(
        arguments: dict[str, Any], rows: int, expected: str, absent: str) -> None:
    error, text, _ = _recorded("search", arguments, rows)
    assert not error and expected in text and absent not in text, text


def test_save_memory_names_the_project_as_stored() -> None:
    error, text, sent = _recorded("save_memory", {"text": "a fact", "project": "  spaced  "})
    assert (error, text) == (False, "Saved as #7 in project spaced.")
    assert sent == [("/api/memory/save", {"text": "a fact", "project": "spaced"})]
    error, text, sent = _recorded("save_memory", {"text": "a fact", "project": " * "})
    assert error and text.startswith('a memory belongs to one project; give its name instead of "*"') and not sent


STALE_SERVER = ("import sys, memcairn; memcairn.__version__ = '0.0.1+old'; from memcairn.cli.entry import main; "
                "sys.exit(main(['mcp']))")


async def _stale_session(env: dict[str, str], cwd: Path, errlog: Any) -> list[tuple[bool, str]]:
    params = StdioServerParameters(command=sys.executable, args=["-c", STALE_SERVER], env=env, cwd=str(cwd))
    results = []
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for arguments in ({"text": "saved by a server older than the package"}, {"text": "and once more"}):
            with anyio.fail_after(20):
                result = await session.call_tool("save_memory", arguments)
            results.append((bool(result.is_error), text_of(result)))
    return results


def test_a_server_older_than_the_installed_package_uses_the_installed_worker(env: dict[str, str],
                                                                            worker: WorkerClient,
                                                                            tmp_path: Path) -> None:
    """After an upgrade the agent's server keeps its old version; it must not replace the new worker with its
    own (which it never gets: a worker started now runs the new files) on every call."""
    cfg = load_settings()
    before = lifecycle.probe(cfg)
    assert before is not None
    with open(tmp_path / "mcp-stderr.log", "w") as errlog:
        results = anyio.run(_stale_session, env, tmp_path, errlog)
    assert [error for error, _ in results] == [False, False], results
    assert all(text.startswith("Saved as #") for _, text in results)
    assert lifecycle.probe(cfg)["pid"] == before["pid"]  # the installed version's worker kept running
    assert "restart the MCP server" in (tmp_path / "mcp-stderr.log").read_text()

    lifecycle.stop(cfg, timeout=10)  # and with no worker, the installed package starts its own
    with open(tmp_path / "mcp-stderr.log", "w") as errlog:
        results = anyio.run(_stale_session, env, tmp_path, errlog)
    assert [error for error, _ in results] == [False, False], results
    assert lifecycle.probe(cfg)["version"] == lifecycle.current_version()


def test_timeline_takes_the_cli_s_before_and_after_and_the_earlier_depth_names() -> None:
    from memcairn.mcp.tools import checked_arguments

    assert checked_arguments("timeline", {"anchor": "3", "before": 2, "after": 4}) == {
        "anchor": "3", "before": 2, "after": 4}
    assert checked_arguments("timeline", {"anchor": "3", "depth_before": 2, "depth_after": 4}) == {
        "anchor": "3", "before": 2, "after": 4}


def test_codex_whose_hooks_run_gets_the_context_once_from_the_hook(env: dict[str, str], worker: WorkerClient,
                                                                    tmp_path: Path) -> None:
    """Once Codex's hooks run (trusted in /hooks), its SessionStart hook gives the digest: the server's
    instructions (Codex shows them as the tool namespace's description) no longer repeat it. Until then they
    carry it, with a note to the person that nothing is captured, also after the first tool's answer."""
    from memcairn.mcp.server import HOOKS_SILENT, STARTUP_CONTEXT_BY_HOOK

    project = tmp_path.name
    worker.post_json("/api/memory/save", {"project": project, "type": "decision", "title": "Sessions expire in UTC",
                                          "text": "Expiry is compared in UTC everywhere."})
    silent, (_, first_answer) = anyio.run(_initialize, env, tmp_path, "--platform", "codex")
    assert silent is not None and "Sessions expire in UTC" in silent and HOOKS_SILENT in silent
    assert first_answer.rstrip().endswith(HOOKS_SILENT)
    worker.post_json("/api/sessions/init", {"session_id": "codex-1", "cwd": str(tmp_path), "event": "session_start",
                                            "platform_source": "codex"})
    hooked, (error, context) = anyio.run(_initialize, env, tmp_path, "--platform", "codex")
    assert hooked == f"{WORKFLOW}\n{STARTUP_CONTEXT_BY_HOOK}\n" and "<memcairn-memory" not in hooked
    assert not error and "Sessions expire in UTC" in context and HOOKS_SILENT not in context


async def _search_rows(env: dict[str, str], cwd: Path, arguments: dict[str, Any]) -> tuple[bool, str]:
    params = StdioServerParameters(command=MEMCAIRN, args=["mcp"], env=env, cwd=str(cwd))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("search", arguments)
        return bool(result.is_error), text_of(result)


def test_search_arguments_are_snake_case_and_the_earlier_camel_case_still_works(
        env: dict[str, str], worker: WorkerClient, tmp_path: Path) -> None:
    """One spelling in the schema (obs_type, min_score, date_start, order_by, platform_source); dateStart,
    orderBy and platformSource, which agents learned from claude-mem, are still taken."""
    project = tmp_path.name
    for title in ("Older decision on retries", "Newer decision on retries"):
        worker.post_json("/api/memory/save", {"project": project, "type": "decision", "title": title,
                                              "text": f"{title}: three attempts."})
    for order in ({"order_by": "oldest"}, {"orderBy": "oldest"}):
        error, text = anyio.run(_search_rows, env, tmp_path, {"query": "", "date_start": "2000-01-01", **order})
        assert not error and text.index("Older decision") < text.index("Newer decision"), text
    error, text = anyio.run(_search_rows, env, tmp_path, {"query": "retries", "dateStart": "2999-01-01"})
    assert not error and "Older decision" not in text and "Newer decision" not in text
    error, text = anyio.run(_search_rows, env, tmp_path, {"query": "retries", "platform_source": "codex"})
    assert not error and "Newer decision" not in text
