"""JSON of any depth never becomes a 500 nor a lost event: what is nested deeper than ``MAX_DEPTH`` levels is cut
and named, through the hooks, every JSON route of a real worker, the transcript importer and the MCP server."""

from __future__ import annotations

import http.client
import json
import os
import select
import subprocess
from pathlib import Path

import pytest
from hook_helpers import SCRIPT, Workers, hook, payload, pending

from memcairn.wire.json_depth import MAX_DEPTH, cut_deep, cut_deep_text, cut_marker, depth_of, loads_bounded

MARKER = cut_marker()
DEPTHS = (481, 700, 989, 5_000, 100_000)  # the failing range (a RecursionError in redaction), and past json's own


def nested_text(levels: int, leaf: str = '"bottom"') -> str:
    return "[" * levels + leaf + "]" * levels


def test_loads_bounded_cuts_any_depth_and_names_the_cut() -> None:
    for levels in DEPTHS:
        value = loads_bounded(nested_text(levels))
        assert depth_of(value) == MAX_DEPTH
        inner = value
        for _ in range(MAX_DEPTH - 1):
            inner = inner[0]
        assert inner == [MARKER]
    shallow = {"a": [1, {"b": "[[[[ not brackets ]]]]"}]}
    assert loads_bounded(json.dumps(shallow)) is not None and loads_bounded(json.dumps(shallow)) == shallow
    assert cut_deep(shallow) is shallow  # nothing to cut: no copy
    # brackets inside strings do not count, and text that is not JSON stays refused
    text = '{"s": "' + "[" * 200 + '", "deep": ' + nested_text(200) + "}"
    assert json.loads(cut_deep_text(text))["s"] == "[" * 200
    with pytest.raises(ValueError):
        loads_bounded("[" * 100_000)


def _post(port: int, path: str, body: bytes) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def test_deep_bodies_on_every_json_route_of_a_real_worker(env: dict[str, str], workers: Workers) -> None:
    workers.start(env)
    port = int(env["MEMCAIRN_PORT"])
    saved_ids = []
    for levels in DEPTHS:
        deep = nested_text(levels)
        tool = ('{"session_id": "s1", "project": "calc", "tool_name": "Bash", "tool_input": DEEP, '
                '"tool_response": DEEP}').replace("DEEP", deep)
        status, answer = _post(port, "/api/sessions/observations", tool.encode())
        assert status == 202 and answer["status"] == "accepted", (levels, answer)
        status, answer = _post(port, "/api/sessions/init", (
            '{"session_id": "s1", "project": "calc", "prompt": "hi", "metadata": DEEP}'.replace("DEEP", deep)).encode())
        assert status == 202, (levels, answer)
        status, answer = _post(port, "/api/sessions/summarize", (
            '{"session_id": "s1", "project": "calc", "extra": DEEP}'.replace("DEEP", deep)).encode())
        assert status == 202, (levels, answer)
        status, answer = _post(port, "/api/memory/save", (
            f'{{"project": "calc", "text": "deep {levels}", "metadata": {{"deep": {deep}}}}}').encode())
        assert status == 200 and answer["created"], (levels, answer)
        saved_ids.append(answer["id"])
        status, answer = _post(port, "/api/observations/batch", f'{{"ids": {deep}}}'.encode())
        assert status == 400 and "ids" in answer["detail"], (levels, answer)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", f"/api/memory/{saved_ids[-1]}")
    saved = json.loads(conn.getresponse().read())
    conn.close()
    assert saved["text"] == "deep 100000" and MARKER in json.dumps(saved["metadata"])


def test_a_deep_tool_event_through_the_hook_is_stored_with_the_cut_named(env: dict[str, str], project: Path,
                                                                         workers: Workers,
                                                                         isolated_home: Path) -> None:
    workers.start(env)
    for levels in (600, 100_000):
        data = payload("post_tool_use_bash", project, tool_use_id=f"deep-{levels}")
        text = json.dumps(data).replace('"tool_input": {', f'"tool_input": {{"deep": {nested_text(levels)}, ', 1)
        assert hook(env, "post-tool-use", stdin=text.encode())[0] == {}
    events = [e for e in pending(isolated_home) if e.event_type == "observation"]
    assert len(events) == 2
    for event in events:
        tool_input = event.payload["tool_input"]
        assert "pytest" in tool_input["command"] and MARKER in json.dumps(tool_input["deep"])


def test_the_transcript_importer_keeps_a_deep_line(tmp_path: Path) -> None:
    from transcript_builder import Transcript

    from memcairn.store import Store
    from memcairn.transfer.importer import import_transcripts
    from memcairn.wire.config import Settings

    path = (Transcript().prompt("deep input").tool("t1", tool_input={"command": "ls", "deep": "PLACE"})
            .result("t1", "listing").text("done").write(tmp_path / "deep.jsonl"))
    path.write_text(path.read_text(encoding="utf-8").replace('"PLACE"', nested_text(100_000)), encoding="utf-8")
    store = Store(tmp_path / "memcairn.db")
    try:
        report = import_transcripts(store, Settings(home=tmp_path), [path])
        assert report.files == 1 and report.prompts == 1
        assert store.ingest_counts()["failed"] == 0
    finally:
        store.close()


def test_the_mcp_server_answers_deep_arguments_and_keeps_serving(env: dict[str, str], tmp_path: Path) -> None:
    """Arguments of any depth get a tool error naming the argument, and the server goes on serving."""
    proc = subprocess.Popen([str(SCRIPT), "mcp"], env={**os.environ, **env}, cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None

    def send(text: str) -> None:
        proc.stdin.write(text.encode() + b"\n")
        proc.stdin.flush()

    def answer(timeout: float = 20.0) -> dict:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        assert ready, "no answer"
        return json.loads(proc.stdout.readline())

    def call(call_id: int, name: str, arguments: str) -> None:
        send(f'{{"jsonrpc": "2.0", "id": {call_id}, "method": "tools/call", '
             f'"params": {{"name": "{name}", "arguments": {arguments}}}}}')

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}))
        assert answer()["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        for call_id, levels in ((2, 150), (3, 100_000)):
            call(call_id, "search", f'{{"query": {nested_text(levels)}}}')
            got = answer()
            assert got["id"] == call_id and got["result"]["isError"]
            assert "query must be text" in got["result"]["content"][0]["text"]
        call(4, "important_workflow", "{}")
        got = answer()
        assert got["id"] == 4 and not got["result"].get("isError")
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdin.close()
        proc.stdout.close()


def test_the_stop_hook_reads_the_last_answer_past_a_deep_line(tmp_path: Path) -> None:
    """The stop hook reads a transcript backwards for the last answer: a deep line after it is passed over."""
    from memcairn.wire.transcript_end import last_assistant_text

    answer = {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "All done."}]}}
    path = tmp_path / "session.jsonl"
    path.write_text(json.dumps(answer) + "\n" + '{"type": "user", "deep": ' + nested_text(100_000) + "}\n",
                    encoding="utf-8")
    assert last_assistant_text(str(path)) == "All done."
