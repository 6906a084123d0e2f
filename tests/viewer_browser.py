"""The web viewer in a real browser, shared by the viewer's tests: the system Chromium (installed by
``scripts/install-system-deps`` when missing, never downloaded by Playwright), a real worker on a free loopback
port with its own home, pages with collected console errors, and saving and finding rows."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright
from processes import free_port

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
INSTALL_SCRIPT = ROOT / "scripts" / "install-system-deps"
WORKER_COMMAND = [sys.executable, "-m", "memcairn", "worker", "run"]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
READY_TIMEOUT_S = 30
SSE_DEADLINE_MS = 2000
STEP_TIMEOUT_MS = 5000
# Read at import: the tests' own environment drops MEMCAIRN_* variables (conftest.isolated_home).
SKIP_SYSTEM_DEPS = os.environ.get("MEMCAIRN_SKIP_SYSTEM_DEPS") == "1"


def ensure_chromium() -> None:
    if CHROMIUM.exists():
        return
    if SKIP_SYSTEM_DEPS:
        pytest.skip(f"{CHROMIUM} is absent and MEMCAIRN_SKIP_SYSTEM_DEPS=1 says not to install it")
    detail = "scripts/install-system-deps is missing"
    if INSTALL_SCRIPT.exists():
        try:
            done = subprocess.run([str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=240, check=False)
            detail = (done.stderr or done.stdout).strip()[-500:] or f"exit status {done.returncode}"
        except (OSError, subprocess.TimeoutExpired) as exc:
            detail = str(exc)
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent and could not be installed ({detail})")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def launch(client: httpx.Client, env: dict[str, str], cwd: Path, log: Any, log_path: Path) -> subprocess.Popen[bytes]:
    """Start a worker and wait until it answers ready; ``client.proc`` is the process."""
    proc = subprocess.Popen(WORKER_COMMAND, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    client.proc = proc  # type: ignore[attr-defined]
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"worker exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
        try:
            if client.get("/api/readiness", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"worker not ready after {READY_TIMEOUT_S}s:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.1)


def restart(client: httpx.Client, env: dict[str, str], cwd: Path, log: Any, log_path: Path) -> None:
    """Stop the worker and start a new one on the same port and home (what ``memcairn worker restart`` does)."""
    stop(client.proc)  # type: ignore[attr-defined]
    launch(client, env, cwd, log, log_path)


@contextmanager
def browser_page(tmp_path: Path, **context_options: Any) -> Iterator[Page]:
    """A page in the system Chromium with a fresh profile; console errors collected on ``page.errors``."""
    ensure_chromium()
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 860},
            color_scheme="light",
            locale="en-GB",
            **context_options,
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(STEP_TIMEOUT_MS)
            errors: list[str] = []
            page.on("console", lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            page.errors = errors  # type: ignore[attr-defined]
            yield page
        finally:
            context.close()


def save(client: httpx.Client, **fields: Any) -> int:
    response = client.post("/api/memory/save", json=fields)
    assert response.status_code in (200, 201), response.text
    body = response.json()
    assert body["created"] is True
    return int(body["id"])


def row(page: Page, scope: str, item_id: int):
    return page.locator(f'{scope} [data-item-id="{item_id}"]')


def wait_until_loaded(page: Page) -> None:
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    expect(page.locator("#feed")).not_to_have_attribute("aria-busy", "true")


@contextmanager
def running_worker(tmp_path: Path) -> Iterator[httpx.Client]:
    """A real worker on a free loopback port with its own home; an HTTP client bound to it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
    env.update(
        MEMCAIRN_HOME=str(tmp_path / "worker-home"),
        MEMCAIRN_PORT=str(port),
        MEMCAIRN_EMBEDDING_MODEL="hash",
        PYTHONUNBUFFERED="1",
    )
    log_path = tmp_path / "worker.log"
    base_url = f"http://127.0.0.1:{port}"
    with log_path.open("ab") as log, httpx.Client(base_url=base_url, timeout=10, trust_env=False) as client:
        launch(client, env, tmp_path, log, log_path)
        client.restart = lambda: restart(client, env, tmp_path, log, log_path)  # type: ignore[attr-defined]
        try:
            yield client
        finally:
            stop(client.proc)  # type: ignore[attr-defined]


def dialog_messages(page: Page) -> list[str]:
    """Dismiss every dialog the page opens; the list collects their messages."""
    messages: list[str] = []

    def dismiss(dialog: Any) -> None:
        messages.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    return messages
