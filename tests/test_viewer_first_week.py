"""The viewer as a developer meets it in the first week, in the system Chromium against a real worker: search
hits scored and marked weak as the CLI does, the detail pane following the filters, inline code, 24-hour times
in any locale, a loading state until the feed answers, and a delete confirmation without invisible characters."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, Route, expect, sync_playwright
from processes import free_port
from viewer_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    STEP_TIMEOUT_MS,
    browser_page,
    launch,
    running_worker,
    stop,
)
from viewer_browser import dialog_messages as _dialog_messages
from viewer_browser import ensure_chromium as _ensure_chromium
from viewer_browser import row as _row
from viewer_browser import save as _save
from viewer_browser import wait_until_loaded as _wait_until_loaded

from memcairn.core.models import NewItem
from memcairn.search.relevance import STRONG
from memcairn.search.render import WEAK_ONLY
from memcairn.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[httpx.Client]:
    """A real worker on a free loopback port with its own home; an HTTP client bound to it."""
    with running_worker(tmp_path) as client:
        yield client


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    """A page in the system Chromium, in the UTC time zone."""
    with browser_page(tmp_path, timezone_id="UTC") as page:
        yield page


def _store(tmp_path: Path) -> Store:
    """The worker's own SQLite file (the ``worker`` fixture's home), written from this process: the worker
    shows another process's writes as its own."""
    return Store(tmp_path / "worker-home" / "memcairn.db")


@contextmanager
def _page_in(tmp_path: Path, locale: str) -> Iterator[Page]:
    _ensure_chromium()
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / f"chromium-{locale}"), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 860}, locale=locale, timezone_id="UTC")
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(STEP_TIMEOUT_MS)
            yield page
        finally:
            context.close()


@pytest.fixture
def keyword_worker(tmp_path: Path) -> Iterator[httpx.Client]:
    """The real worker without a semantic mirror: the test embedding model has no calibrated floor, so only the
    keyword leg's evidence can make a hit weak."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCAIRN_")}
    env.update(MEMCAIRN_HOME=str(tmp_path / "worker-home"), MEMCAIRN_PORT=str(port), MEMCAIRN_EMBEDDING_MODEL="hash",
               MEMCAIRN_VECTOR_BACKEND="none", PYTHONUNBUFFERED="1")
    log_path = tmp_path / "worker.log"
    with log_path.open("ab") as log, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10,
                                                  trust_env=False) as client:
        launch(client, env, tmp_path, log, log_path)
        try:
            yield client
        finally:
            stop(client.proc)  # type: ignore[attr-defined]


def test_search_hits_show_the_clis_relevance_and_weak_mark(keyword_worker: httpx.Client, page: Page) -> None:
    worker = keyword_worker
    strong = _save(worker, project="viewer-test", title="zephyrquartz lanternfish migration", text="t", type="note")
    weak = _save(worker, project="viewer-test", title="zephyrquartz only", text="t", type="note")
    query = "zephyrquartz lanternfish"
    hits = worker.get("/api/search", params={"query": query, "format": "json"}).json()["results"]
    relevance = {hit["id"]: hit["relevance"] for hit in hits}
    assert relevance[strong] >= STRONG > relevance[weak], relevance  # what the CLI marks weak
    assert {hit["id"]: hit["weak"] for hit in hits} == {strong: False, weak: True}  # the hit says so itself

    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    page.locator("#search-input").fill(query)
    page.locator("#search-input").press("Enter")
    for item_id, value in relevance.items():
        row = _row(page, "#results", item_id)
        expect(row.locator(".row-score")).to_have_text(f"relevance {value:.2f}")
        expect(row.locator(".row-weak")).to_have_count(1 if value < STRONG else 0)
    expect(_row(page, "#results", weak).locator(".row-weak")).to_have_text("weak")


def test_a_search_of_weak_hits_only_or_none_says_so_as_the_cli_does(keyword_worker: httpx.Client, page: Page) -> None:
    worker = keyword_worker
    _save(worker, project="viewer-test", title="zephyrquartz only", text="t", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    search = page.locator("#search-input")
    search.fill("zephyrquartz lanternfish")  # one word of two: a weak match only
    search.press("Enter")
    expect(page.locator("#search-notes")).to_have_text(re.compile("^" + re.escape(WEAK_ONLY)))
    # keyword evidence alone (this worker has no mirror): a memory sharing only how the question is asked is hidden
    _save(worker, project="viewer-test", title="many thanks", text="t", type="note")
    search.fill("how many narwhals")
    search.press("Enter")
    hidden = worker.get("/api/search", params={"query": "how many narwhals", "format": "json"}).json()
    assert hidden["results"] == [] and hidden["hidden"] == 1
    expect(page.locator("#results .empty")).to_have_text("No memory matches the query; 1 weaker match hidden.")
    expect(page.locator("#search-notes")).not_to_contain_text(WEAK_ONLY)


def test_the_detail_is_cleared_when_the_filters_leave_its_memory_out(worker: httpx.Client, page: Page,
                                                                     tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        summary = store.add_item(NewItem(project="viewer-test", kind="summary", session="s1",
                                         request="Make the importer resumable", completed="resumes at the offset",
                                         platform_source="claude-code")).id
    finally:
        store.close()
    note = _save(worker, project="viewer-test", title="An observation-free note", text="t", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    _row(page, "#feed", summary).click()
    expect(page.locator("#detail [data-field='completed']")).to_contain_text("resumes at the offset")

    page.locator("#kind-filter").select_option("observation")
    expect(page.locator("#detail-body")).to_be_hidden()
    expect(page.locator("#detail-heading")).to_have_text("Memory")
    expect(page.locator("#delete-button")).to_be_hidden()

    # a memory the filters still hold stays open
    page.locator("#kind-filter").select_option("manual")
    _row(page, "#feed", note).click()
    page.locator("#project-filter").select_option("viewer-test")
    expect(page.locator("#detail-heading")).to_have_text("An observation-free note")


def test_inline_code_is_code_and_stays_text(worker: httpx.Client, page: Page) -> None:
    hostile = '<img src=x onerror="window.__pwned = 1">'
    item_id = _save(worker, project="viewer-test", title="Ran `pytest -q` after the fix",
                    text=f"Run `make check` before `git push`. Markup: `{hostile}`; a lone ` stays.", type="note",
                    facts=["`ruff check` is clean"])
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    row = _row(page, "#feed", item_id)
    expect(row.locator(".row-title code")).to_have_text("pytest -q")
    row.click()
    prose = page.locator("#detail [data-field='text'] .prose")
    expect(prose.locator("code")).to_have_text(["make check", "git push", hostile])
    expect(prose).to_have_text(f"Run make check before git push. Markup: {hostile}; a lone ` stays.")
    expect(page.locator("#detail [data-field='facts'] code")).to_have_text("ruff check")
    assert page.locator("#detail img").count() == 0 and page.evaluate("window.__pwned") is None


@pytest.mark.parametrize("locale", ["en-US", "en-GB", "de-DE"])
def test_times_are_24_hour_in_any_locale(worker: httpx.Client, tmp_path: Path, locale: str) -> None:
    at = int(datetime(2026, 12, 3, 15, 7, tzinfo=UTC).timestamp() * 1000)  # an afternoon: 3:07 PM in en-US
    store = _store(tmp_path)
    try:
        item_id = store.add_item(NewItem(project="viewer-test", kind="manual", type="note", title="Afternoon",
                                         text="t", created_at_epoch=at)).id
    finally:
        store.close()
    with _page_in(tmp_path, locale) as page:
        page.goto(str(worker.base_url.join("/")))
        _wait_until_loaded(page)
        label = _row(page, "#feed", item_id).locator("time")
        expect(label).to_contain_text("15:07")
        _row(page, "#feed", item_id).click()
        created = page.locator("#detail .record-meta time").first
        expect(created).to_contain_text("15:07")
        for text in (label.inner_text(), label.get_attribute("title") or "", created.inner_text()):
            assert "15:07" in text and not re.search(r"\b[AP]\.?M\b", text, re.IGNORECASE), text


def test_the_feed_says_it_is_loading_until_its_first_answer(worker: httpx.Client, page: Page) -> None:
    item_id = _save(worker, project="viewer-test", title="Saved before the page opened", text="t", type="note")
    held: list[Route] = []
    released: list[bool] = []

    def hold(route: Route) -> None:
        if released:
            route.continue_()
        else:
            held.append(route)

    page.route(re.compile(r"/api/search\?"), hold)
    page.goto(str(worker.base_url.join("/")))
    # the projects answered (the filter lists the project) while the feed has not
    expect(page.locator('#project-filter option[value="viewer-test"]')).to_have_count(1)
    expect(page.locator("#feed-empty")).to_be_visible()
    expect(page.locator("#feed-empty")).to_have_text("Connecting to the worker…")
    expect(page.locator("#feed-meta")).to_have_text("Loading…")
    assert held, "the feed's request was not held"
    released.append(True)
    for route in held:
        route.continue_()
    expect(_row(page, "#feed", item_id)).to_be_visible()
    expect(page.locator("#feed-empty")).to_be_hidden()
    expect(page.locator("#feed-meta")).to_have_text("1 shown")


def test_the_delete_confirmation_holds_no_invisible_direction_characters(worker: httpx.Client, page: Page) -> None:
    titles = ["מחיקת המטמון נכשלה!", "Drop the cache (twice)"]
    ids = [_save(worker, project="viewer-test", title=title, text="t", type="note") for title in titles]
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    messages = _dialog_messages(page)
    for title, item_id in zip(titles, ids, strict=True):
        _row(page, "#feed", item_id).click()
        expect(page.locator("#detail-heading")).to_have_text(title)
        page.locator("#delete-button").click()
        expect(page.locator("#delete-button")).to_be_enabled()
    assert len(messages) == 2
    for message, title, item_id in zip(messages, titles, ids, strict=True):
        assert message == f"Delete memory #{item_id}?\n\n{title}\n\nThis cannot be undone.", message
        assert not re.search("[\u200e\u200f\u202a-\u202e\u2066-\u2069]", message)
    assert all(worker.get(f"/api/memory/{i}").status_code == 200 for i in ids)

