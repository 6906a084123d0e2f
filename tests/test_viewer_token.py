"""The viewer off loopback: ``/?token=`` trades the token for a cookie, the cookie authenticates the API and
the event stream, the browser's own origin may write and every other origin is still refused; loopback without
a token is unchanged. In process for the guards, then a real worker bound to every interface in Chromium.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import viewer_browser as vb
from starlette.testclient import TestClient
from worker_app import wait_ready

from memcairn.wire.config import Settings
from memcairn.worker.app import make_app
from memcairn.worker.daemon import TOKEN_PLACEHOLDER, viewer_url
from memcairn.worker.security import cookie_name, cookie_value

PORT = 37877
LAN = f"192.168.1.20:{PORT}"
TOKEN = "s3cret-viewer-token"
COOKIE = f"{cookie_name(PORT)}={cookie_value(TOKEN)}"




def static_dir(tmp_path: Path) -> Path:
    static = tmp_path / "static"
    static.mkdir(exist_ok=True)
    (static / "index.html").write_text("<!doctype html><title>viewer</title>")
    return static


@pytest.fixture
def lan(cfg: Settings, tmp_path: Path) -> Iterator[TestClient]:
    """A worker bound to every interface with a token, reached as http://192.168.1.20:37877."""
    app = make_app(None, dataclasses.replace(cfg, host="0.0.0.0", token=TOKEN), static_dir=static_dir(tmp_path))
    with TestClient(app, base_url=f"http://{LAN}", follow_redirects=False) as c:
        wait_ready(app)
        yield c


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code and body["detail"], body
    return body


def set_cookies(response: httpx.Response) -> list[str]:
    return response.headers.get_list("set-cookie")


# -- the exchange -------------------------------------------------------------------------------------
@pytest.mark.parametrize("query", ["?token=wrong", "?token=", f"?token={TOKEN}x", f"?token={TOKEN[:-1]}"])
def test_a_wrong_token_in_the_address_is_refused_and_sets_no_cookie(lan: TestClient, query: str) -> None:
    response = lan.get(f"/{query}")
    body = assert_error(response, 401, "unauthorized")
    assert "no cookie" in body["detail"]
    assert set_cookies(response) == [] and not lan.cookies
    assert response.headers["cache-control"] == "no-store"
    assert_error(lan.get("/api/health"), 401, "unauthorized")


def test_the_token_in_the_address_sets_the_cookie_and_redirects(lan: TestClient) -> None:
    response = lan.get(f"/?token={TOKEN}")
    assert response.status_code == 303 and response.headers["location"] == "/"
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["referrer-policy"] == "no-referrer"
    [cookie] = set_cookies(response)
    name_value, *attributes = [part.strip() for part in cookie.split(";")]
    name, value = name_value.split("=", 1)
    assert name == cookie_name(PORT) and value == cookie_value(TOKEN)
    assert TOKEN not in cookie and len(value) == 64
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(attributes)
    assert "Secure" not in attributes  # plain http: a Secure cookie would never come back
    # Other parameters of the address survive; only the token leaves it. Surrounding spaces are forgiven, as in
    # the header.
    kept = lan.get(f"/?project=demo&token=%20{TOKEN}%20")
    assert kept.status_code == 303 and kept.headers["location"] == "/?project=demo"


def test_the_cookie_is_derived_from_the_token() -> None:
    assert cookie_value(TOKEN) == cookie_value(f" {TOKEN}\n") != cookie_value("another-token")
    assert TOKEN not in cookie_value(TOKEN)
    assert cookie_name(PORT) != cookie_name(PORT + 1)  # two workers on one machine keep their own cookie


# -- the cookie authenticates -------------------------------------------------------------------------
def test_the_cookie_authenticates_the_page_and_the_api(lan: TestClient) -> None:
    for path in ("/", "/api/health", "/api/stats", "/openapi.json"):
        assert lan.get(path).status_code == 401, path
        assert lan.get(path, headers={"Cookie": COOKIE}).status_code == 200, path
    assert "<title>viewer</title>" in lan.get("/", headers={"Cookie": COOKIE}).text
    # Another cookie beside it, or a planted one of the same name first, does not hide it.
    planted = f"{cookie_name(PORT)}={'0' * 64}; other=1; {COOKIE}"
    assert lan.get("/api/health", headers={"Cookie": planted}).status_code == 200
    for forged in (f"{cookie_name(PORT)}={TOKEN}", f"{cookie_name(PORT)}={'0' * 64}",
                   f"{cookie_name(PORT + 1)}={cookie_value(TOKEN)}", f"{cookie_name(PORT)}="):
        assert_error(lan.get("/api/health", headers={"Cookie": forged}), 401, "unauthorized")
    # The bearer header keeps working beside it.
    assert lan.get("/api/health", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_the_browser_flow_in_a_cookie_jar(lan: TestClient) -> None:
    """What the browser does: open /?token=, follow the redirect with the cookie, then read and write."""
    landed = lan.get(f"/?token={TOKEN}", follow_redirects=True)
    assert landed.status_code == 200 and "<title>viewer</title>" in landed.text
    assert str(landed.url) == f"http://{LAN}/"
    saved = lan.post("/api/memory/save", json={"text": "saved from the LAN viewer"},
                     headers={"Origin": f"http://{LAN}"})
    assert saved.status_code == 200 and saved.json()["created"] is True, saved.text
    item = lan.get(f"/api/memory/{saved.json()['id']}")
    assert item.status_code == 200 and item.json()["text"] == "saved from the LAN viewer"
    deleted = lan.delete(f"/api/memory/{saved.json()['id']}", headers={"Origin": f"http://{LAN}"})
    assert deleted.status_code == 200, deleted.text


async def _open_stream(app: Any, host: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    """GET /stream at the ASGI level: the status and the body up to the first event or the end of an error
    answer (then the client goes away)."""
    async with app.router.lifespan_context(app):
        deadline = time.monotonic() + 20
        while app.state.worker.phase != "ready":
            assert time.monotonic() < deadline, "worker did not become ready"
            await asyncio.sleep(0.01)
        started: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            await started.put(message)

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
                 "method": "GET", "scheme": "http", "path": "/stream", "raw_path": b"/stream", "query_string": b"",
                 "root_path": "", "headers": [(b"host", host.encode()), *headers], "client": ("192.168.1.7", 1),
                 "server": ("192.168.1.20", PORT), "state": {}}
        task = asyncio.create_task(app(scope, receive, send))
        try:
            start = await asyncio.wait_for(started.get(), timeout=10)
            body = b""
            while True:
                message = await asyncio.wait_for(started.get(), timeout=10)
                body += message.get("body", b"")
                if b"event:" in body or not message.get("more_body", False):
                    return start["status"], body
        finally:
            gone.set()
            await asyncio.wait_for(task, timeout=5)


def test_the_cookie_authenticates_the_event_stream(cfg: Settings) -> None:
    secured = dataclasses.replace(cfg, host="0.0.0.0", token=TOKEN)
    status, body = asyncio.run(_open_stream(make_app(None, secured), LAN, [(b"cookie", COOKIE.encode())]))
    assert status == 200 and b"event: status" in body
    status, body = asyncio.run(_open_stream(make_app(None, secured), LAN, []))
    assert status == 401 and json.loads(body)["error"] == "unauthorized"
    forged = f"{cookie_name(PORT)}={TOKEN}".encode()
    status, _ = asyncio.run(_open_stream(make_app(None, secured), LAN, [(b"cookie", forged)]))
    assert status == 401


# -- origins and hosts off loopback -------------------------------------------------------------------
@pytest.mark.parametrize("host", [LAN, f"myhost.local:{PORT}", f"[fe80::1]:{PORT}", f"10.0.0.5:{PORT}"])
def test_the_viewers_own_origin_may_write_from_any_address_that_reaches_the_worker(lan: TestClient,
                                                                                  host: str) -> None:
    headers = {"Host": host, "Cookie": COOKIE}
    assert lan.get("/api/health", headers=headers).status_code == 200
    saved = lan.post("/api/memory/save", json={"text": f"written via {host}"},
                     headers={**headers, "Origin": f"http://{host}"})
    assert saved.status_code == 200, saved.text


@pytest.mark.parametrize("origin", [
    "http://evil.example",
    f"http://evil.example:{PORT}",
    "http://192.168.1.20:8080",  # another service on the same machine: same site, so it would carry the cookie
    f"https://{LAN}",  # another scheme is another origin
    f"http://192.168.1.21:{PORT}",
    f"http://127.0.0.1:{PORT + 1}",
    "null",
])
def test_foreign_origins_are_still_refused_off_loopback(lan: TestClient, origin: str) -> None:
    for credentials in ({"Cookie": COOKIE}, {"Authorization": f"Bearer {TOKEN}"}):
        headers = {**credentials, "Origin": origin}
        assert_error(lan.post("/api/memory/save", json={"text": "csrf"}, headers=headers), 403, "forbidden_origin")
        assert_error(lan.get("/api/search?query=x", headers=headers), 403, "forbidden_origin")
        assert_error(lan.delete("/api/memory/1", headers=headers), 403, "forbidden_origin")
    assert_error(lan.get(f"/?token={TOKEN}", headers={"Origin": origin}), 403, "forbidden_origin")


def test_a_rebound_name_passes_the_origin_check_but_not_the_token(lan: TestClient) -> None:
    """DNS rebinding off loopback: the attacker's page is its own origin, but holds neither token nor cookie
    (its own cookies, whatever it sets, cannot carry the HMAC of a token it does not know)."""
    rebound = {"Host": f"evil.example:{PORT}", "Origin": f"http://evil.example:{PORT}"}
    assert_error(lan.post("/api/memory/save", json={"text": "x"}, headers=rebound), 401, "unauthorized")
    assert_error(lan.get("/api/search?query=x", headers=rebound), 401, "unauthorized")
    planted = {**rebound, "Cookie": f"{cookie_name(PORT)}={cookie_value('guessed')}"}
    assert_error(lan.get("/api/health", headers=planted), 401, "unauthorized")


def test_the_401_tells_a_browser_how_to_get_in(lan: TestClient) -> None:
    body = assert_error(lan.get("/"), 401, "unauthorized")
    assert "/?token=<MEMCAIRN_TOKEN>" in body["detail"]


# -- loopback -----------------------------------------------------------------------------------------
def test_loopback_without_a_token_is_unchanged(cfg: Settings, tmp_path: Path) -> None:
    app = make_app(None, cfg, static_dir=static_dir(tmp_path))
    with TestClient(app, base_url=f"http://127.0.0.1:{PORT}", follow_redirects=False) as c:
        wait_ready(app)
        page = c.get("/?token=anything")  # no token configured: the page, no cookie, no redirect
        assert page.status_code == 200 and "<title>viewer</title>" in page.text and set_cookies(page) == []
        assert c.get("/api/health").status_code == 200  # no credential needed
        assert c.post("/api/memory/save", json={"text": "x"},
                      headers={"Origin": f"http://127.0.0.1:{PORT}"}).status_code == 200
        assert_error(c.get("/api/health", headers={"Host": f"evil.example:{PORT}"}), 403, "forbidden_host")
        assert_error(c.get("/", headers={"Host": LAN}), 403, "forbidden_host")
        # The "own origin as the browser sees it" rule is off-loopback only: here the Host is loopback anyway,
        # and a rebound page (no credential needed) must not pass.
        assert_error(c.post("/api/memory/save", json={"text": "x"}, headers={"Origin": f"http://{LAN}"}),
                     403, "forbidden_origin")
        assert_error(c.post("/api/memory/save", json={"text": "x"},
                            headers={"Host": "localhost", "Origin": "http://localhost"}), 403, "forbidden_origin")


def test_loopback_with_a_token_trades_it_for_the_cookie_too(cfg: Settings, tmp_path: Path) -> None:
    app = make_app(None, dataclasses.replace(cfg, token=TOKEN), static_dir=static_dir(tmp_path))
    with TestClient(app, base_url=f"http://127.0.0.1:{PORT}", follow_redirects=False) as c:
        wait_ready(app)
        assert_error(c.get("/?token=wrong"), 401, "unauthorized")
        good = c.get(f"/?token={TOKEN}")
        assert good.status_code == 303 and good.headers["location"] == "/"
        assert set_cookies(good)[0].startswith(f"{COOKIE};")
        assert c.get("/api/health").status_code == 200  # loopback still asks for no credential
        # The cookie opens no door the loopback guards keep shut.
        assert_error(c.get("/api/health", headers={"Host": f"evil.example:{PORT}", "Cookie": COOKIE}),
                     403, "forbidden_host")
        assert_error(c.post("/api/memory/save", json={"text": "x"},
                            headers={"Cookie": COOKIE, "Origin": "http://evil.example"}), 403, "forbidden_origin")


# -- the logged address -------------------------------------------------------------------------------
def test_the_logged_viewer_url_names_the_token_without_revealing_it(cfg: Settings) -> None:
    assert viewer_url(cfg) == f"http://127.0.0.1:{PORT}/"
    assert viewer_url(dataclasses.replace(cfg, token=TOKEN)) == f"http://127.0.0.1:{PORT}/"  # no cookie needed
    bound = viewer_url(dataclasses.replace(cfg, host="192.168.1.20", token=TOKEN))
    assert bound == f"http://{LAN}/?token={TOKEN_PLACEHOLDER}"
    assert viewer_url(dataclasses.replace(cfg, host="fe80::1", token=TOKEN)).startswith(f"http://[fe80::1]:{PORT}/")
    wildcard = viewer_url(dataclasses.replace(cfg, host="0.0.0.0", token=TOKEN))
    assert wildcard.endswith(f":{PORT}/?token={TOKEN_PLACEHOLDER}") and "0.0.0.0" not in wildcard
    assert TOKEN not in wildcard + bound


# -- a real worker on every interface, in Chromium ----------------------------------------------------
CHROMIUM, _ensure_chromium = vb.CHROMIUM, vb.ensure_chromium
CHROMIUM_ARGS = [*vb.CHROMIUM_ARGS, "--no-proxy-server"]
READY_TIMEOUT_S, SSE_DEADLINE_MS, STEP_TIMEOUT_MS = vb.READY_TIMEOUT_S, vb.SSE_DEADLINE_MS, vb.STEP_TIMEOUT_MS
MARKER = "quillonyx"  # a word no other memory in the test contains


def _free_wildcard_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def _non_loopback_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (its default route's), or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("10.255.255.255", 9))  # UDP: nothing is sent
            address = sock.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


_stop = vb.stop


@pytest.fixture
def lan_worker(tmp_path: Path) -> Iterator[httpx.Client]:
    """A real worker bound to 0.0.0.0 with a random token, reached at this machine's non-loopback address (or
    127.0.0.1 where there is none); a client holding the bearer token. ``client.token`` and ``client.log_path``."""
    port = _free_wildcard_port()
    token = secrets.token_urlsafe(24)
    home = tmp_path / "worker-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
    env.update(MEMCAIRN_HOME=str(home), MEMCAIRN_PORT=str(port), MEMCAIRN_HOST="0.0.0.0", MEMCAIRN_TOKEN=token,
               MEMCAIRN_EMBEDDING_MODEL="hash", PYTHONUNBUFFERED="1")
    address = _non_loopback_address() or "127.0.0.1"
    out_path = tmp_path / "worker.out"
    with out_path.open("ab") as out, httpx.Client(base_url=f"http://{address}:{port}", timeout=10, trust_env=False,
                                                  headers={"Authorization": f"Bearer {token}"}) as client:
        proc = subprocess.Popen([sys.executable, "-m", "memcairn", "worker", "run"], env=env, cwd=tmp_path,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"worker exited with {proc.returncode}:\n{out_path.read_text(errors='replace')}")
                try:
                    if client.get("/api/readiness", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"worker not ready after {READY_TIMEOUT_S}s:\n{out_path.read_text(errors='replace')}")
                time.sleep(0.1)
            client.token = token  # type: ignore[attr-defined]
            client.log_path = home / "logs" / "worker.log"  # type: ignore[attr-defined]
            yield client
        finally:
            _stop(proc)


@pytest.mark.slow
def test_viewer_off_loopback_in_a_real_browser(lan_worker: httpx.Client, tmp_path: Path) -> None:
    """Opening /?token= once loads the feed over the cookie, the token leaves the address, an item saved
    through the API appears live (EventSource with the cookie), and the viewer's delete (a write with the
    page's Origin) goes through.

    With a non-loopback address on this machine the browser reaches the worker by it, as a second machine on
    the LAN would (same Host and Origin; only the network path differs). Where there is none it browses via
    127.0.0.1: that still proves the cookie flow and that a worker bound to every interface demands the token
    on loopback too, but not the acceptance of a LAN Host and Origin (the in-process tests cover those)."""
    from playwright.sync_api import expect, sync_playwright

    _ensure_chromium()
    token: str = lan_worker.token  # type: ignore[attr-defined]
    base = str(lan_worker.base_url).rstrip("/")
    old = lan_worker.post("/api/memory/save", json={"project": "lan", "title": "Saved before the page opened",
                                                    "text": "The feed loads it."}).json()["id"]
    assert httpx.get(f"{base}/", trust_env=False).status_code == 401  # no credential, no page
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 860}, timezone_id="UTC", locale="en-GB")
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(STEP_TIMEOUT_MS)
            errors: list[str] = []
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))

            page.goto(f"{base}/?token={token}")
            expect(page).to_have_url(f"{base}/")  # the token left the address bar
            expect(page).to_have_title("memcairn")
            expect(page.locator("#connection")).to_have_attribute("data-state", "live")
            expect(page.locator("#feed")).not_to_have_attribute("aria-busy", "true")
            expect(page.locator(f'#feed [data-item-id="{old}"]')).to_be_visible()
            [cookie] = context.cookies()
            assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
            assert token not in cookie["value"]
            assert page.evaluate("document.cookie") == ""  # HttpOnly: the page's scripts cannot read it

            title = f"Live over the LAN {MARKER}"
            new = lan_worker.post("/api/memory/save", json={"project": "lan", "title": title,
                                                            "text": f"{MARKER} arrives over SSE."}).json()["id"]
            row = page.locator(f'#feed [data-item-id="{new}"]')
            expect(row).to_be_visible(timeout=SSE_DEADLINE_MS)
            expect(row).to_contain_text(title)

            row.click()
            expect(page.locator("#detail-heading")).to_have_text(title)
            page.once("dialog", lambda dialog: dialog.accept())
            page.locator("#delete-button").click()
            expect(page.locator(f'[data-item-id="{new}"]')).to_have_count(0)
            assert lan_worker.get(f"/api/memory/{new}").status_code == 404
            assert errors == []
        finally:
            context.close()
    log_text = lan_worker.log_path.read_text()  # type: ignore[attr-defined]
    assert re.search(rf"viewer: http://\S+:{lan_worker.base_url.port}/\?token={re.escape(TOKEN_PLACEHOLDER)}",
                     log_text), log_text
    assert token not in log_text


def test_the_openapi_document_names_the_viewer_cookie_off_loopback(cfg: Settings) -> None:
    from memcairn.worker.openapi import build_openapi

    doc = build_openapi(dataclasses.replace(cfg, host="0.0.0.0", token=TOKEN))
    schemes = doc["components"]["securitySchemes"]
    assert schemes["viewer_cookie"] == {"type": "apiKey", "in": "cookie", "name": cookie_name(PORT),
                                        "description": schemes["viewer_cookie"]["description"]}
    assert doc["security"] == [{"bearer": []}, {"viewer_cookie": []}]
    assert "securitySchemes" not in build_openapi(cfg)["components"]  # loopback: no credential
