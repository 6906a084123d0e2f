"""What a web page or a malformed client may send a real worker (``memcairn worker start`` on a free loopback port):
cross-site writes, non-JSON writes, a read that used to change state, a body shorter than its Content-Length, a
control character in a project name, a query string of 200 KB."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path

from hook_helpers import Workers, pending

from memcairn.store import Store


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read().decode("utf-8")
    finally:
        conn.close()


def items(home: Path) -> list[str]:
    store = Store(home / "memcairn.db")
    try:
        return [i.text or "" for i in store.list_items(limit=100, order="oldest")]
    finally:
        store.close()


SAVE = json.dumps({"project": "calc", "text": "a memory a web page wants to plant"}).encode()
JSON_TYPE = {"Content-Type": "application/json"}


def test_cross_site_and_non_json_writes_are_refused(env: dict[str, str], workers: Workers,
                                                    isolated_home: Path) -> None:
    workers.start(env)
    port = int(env["MEMCAIRN_PORT"])
    # the bodies a page can send to any site without a preflight, and none at all: no Origin header either
    for content_type in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": content_type} if content_type else {}
        for path in ("/api/memory/save", "/api/sessions/observations", "/api/context/inject"):
            status, text = request(port, "POST", path, SAVE, headers)
            assert status == 415 and "application/json" in json.loads(text)["detail"], (path, content_type, text)
    for site in ("cross-site", "same-site"):
        status, text = request(port, "POST", "/api/memory/save", SAVE, {**JSON_TYPE, "Sec-Fetch-Site": site})
        assert status == 403 and json.loads(text)["error"] == "forbidden_site", text
    assert items(isolated_home) == []
    # the person's own tools: no Sec-Fetch-Site (hooks, CLI, MCP), or the viewer's same-origin requests
    status, text = request(port, "POST", "/api/memory/save", SAVE,
                           {"Content-Type": "application/json; charset=utf-8", "Sec-Fetch-Site": "same-origin"})
    assert status == 200, text
    saved = json.loads(text)["id"]
    status, _ = request(port, "DELETE", f"/api/memory/{saved}", headers={"Sec-Fetch-Site": "cross-site"})
    assert status == 403 and len(items(isolated_home)) == 1
    status, _ = request(port, "DELETE", f"/api/memory/{saved}", headers={"Sec-Fetch-Site": "same-origin"})
    assert status == 200 and items(isolated_home) == []
    # reads from another site stay possible (their answers cannot be read without CORS)
    assert request(port, "GET", "/api/health", headers={"Sec-Fetch-Site": "cross-site"})[0] == 200


def test_reading_the_context_marks_no_notice_shown_giving_it_does(env: dict[str, str], workers: Workers,
                                                                   isolated_home: Path) -> None:
    client = workers.start(env)
    port = int(env["MEMCAIRN_PORT"])
    store = Store(isolated_home / "memcairn.db")
    try:
        store.add_capture_notice("llm_config", "memory capture: the model is unreachable")
        for _ in range(2):  # a GET (a page's <img>, a person, the demo) only reads
            status, text = request(port, "GET", "/api/context/inject?projects=calc")
            assert status == 200 and "the model is unreachable" in text
        assert store.pending_capture_notices() == ["memory capture: the model is unreachable"]
        text = client.post_text("/api/context/inject", {"projects": "calc"})  # the SessionStart hook's request
        assert "the model is unreachable" in text
        assert store.pending_capture_notices() == []
    finally:
        store.close()


def test_a_body_short_of_its_content_length_is_answered_at_once(env: dict[str, str], workers: Workers) -> None:
    workers.start(env)
    port = int(env["MEMCAIRN_PORT"])
    # Without the idle limit (1 s) the worker waits for the missing bytes forever and the read below times out:
    # the socket's timeout is the bound, no clock is read. The head and the body may arrive apart.
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(b"POST /api/memory/save HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 500\r\n\r\n" + SAVE)
        answer = b""
        while b"Content-Length" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Content-Length" in answer, answer


def test_a_control_character_in_a_project_is_refused_by_every_write(env: dict[str, str], workers: Workers,
                                                                      isolated_home: Path) -> None:
    workers.start(env)
    port = int(env["MEMCAIRN_PORT"])
    for name in ("calc\x00evil", "calc\nnext", "\x1b[31mred"):
        for path, body in (
            ("/api/sessions/init", {"session_id": "s1", "project": name, "prompt": "hello"}),
            ("/api/sessions/observations", {"session_id": "s1", "project": name, "tool_name": "Bash"}),
            ("/api/sessions/summarize", {"session_id": "s1", "project": "calc", "projects": ["calc", name]}),
            ("/api/memory/save", {"project": name, "text": "note"}),
        ):
            status, text = request(port, "POST", path, json.dumps(body).encode(), JSON_TYPE)
            assert status == 400 and "control character" in json.loads(text)["detail"], (path, name, text)
    assert pending(isolated_home) == [] and items(isolated_home) == []


def test_a_query_string_of_200_kb_gets_414_not_a_reset(env: dict[str, str], workers: Workers) -> None:
    workers.start(env)
    port = int(env["MEMCAIRN_PORT"])
    status, text = request(port, "GET", "/api/search?query=" + "x" * 200_000)
    assert status == 414 and json.loads(text)["error"] == "uri_too_long"
    status, _ = request(port, "GET", "/api/search?format=json&query=" + "y" * 20_000)  # long but within the limit
    assert status == 200
    status, _ = request(port, "GET", "/api/health", headers={f"X-Pad-{i}": "z" * 1000 for i in range(80)})
    assert status == 431
    assert request(port, "GET", "/api/health")[0] == 200  # and the worker goes on serving
    # a long body is no long head: it arrives with the head in one piece and is taken
    big = json.dumps({"project": "calc", "text": "long " * 40_000, "facts": ["fact " * 40_000],
                      "metadata": {"notes": "note " * 40_000}}).encode()
    assert len(big) > 500_000
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /api/memory/save HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(big) + big)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
