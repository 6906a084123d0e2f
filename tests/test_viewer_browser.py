"""The web viewer in a real browser: the system Chromium, driven by Playwright, against a real worker.

Playwright only drives the browser; it never downloads one. ``scripts/install-system-deps`` installs
Debian's chromium, and the test is skipped only when /usr/bin/chromium is missing and cannot be installed.
Screenshots (light and dark) land in ``test-artifacts/``.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from playwright.sync_api import Page, expect
from viewer_browser import ROOT, SSE_DEADLINE_MS, running_worker
from viewer_browser import browser_page as _browser_page
from viewer_browser import dialog_messages as _dialog_messages
from viewer_browser import row as _row
from viewer_browser import save as _save
from viewer_browser import wait_until_loaded as _wait_until_loaded

pytestmark = pytest.mark.slow

ARTIFACTS = ROOT / "test-artifacts"
MARKER = "zephyrquartz"  # a word no other memory in the test contains


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[httpx.Client]:
    """A real worker on a free loopback port with its own home; an HTTP client bound to it."""
    with running_worker(tmp_path) as client:
        yield client


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    """A page in the system Chromium, in the UTC time zone."""
    with _browser_page(tmp_path, timezone_id="UTC") as page:
        yield page


@pytest.fixture
def zoned_page(tmp_path: Path) -> Iterator[Page]:
    """A page whose time zone the test changes while it is open: ``page.set_time_zone("Asia/Kolkata")``.

    Chromium refuses a second override of the zone Playwright sets through ``timezone_id``, so this context
    has none and the zone is set (to UTC first) over the DevTools protocol, as a change of the machine's zone
    reaches an open page.
    """
    with _browser_page(tmp_path) as page:
        cdp = page.context.new_cdp_session(page)

        def set_time_zone(zone: str) -> None:
            cdp.send("Emulation.setTimezoneOverride", {"timezoneId": zone})

        set_time_zone("UTC")
        page.set_time_zone = set_time_zone  # type: ignore[attr-defined]
        yield page


def test_viewer_feed_search_detail_delete(worker: httpx.Client, page: Page) -> None:
    # Memories saved before the page opens fill the feed on load; one has a hostile title.
    older = _save(worker, project="viewer-other", title="Use WAL mode for the store",
                  text="SQLite runs in WAL mode so readers never block the writer.", type="decision")
    hostile_title = '<img src=x onerror="window.__pwned = 1">'
    hostile = _save(worker, project="viewer-other", title=hostile_title, text="markup must stay text", type="note")

    page.goto(str(worker.base_url.join("/")))
    expect(page).to_have_title("memcairn")
    _wait_until_loaded(page)
    expect(_row(page, "#feed", older)).to_be_visible()
    expect(_row(page, "#feed", hostile)).to_contain_text(hostile_title)
    assert page.evaluate("window.__pwned") is None
    assert page.errors == []  # type: ignore[attr-defined]

    # A memory saved through the API arrives over SSE, newest on top.
    title = f"Viewer check {MARKER}"
    text = f"The viewer shows {MARKER} live, finds it, opens it and deletes it."
    started = time.monotonic()
    fact = "Rows are rendered with textContent only."
    item_id = _save(worker, project="viewer-test", title=title, text=text, type="note", facts=[fact],
                    concepts=["viewer", "sse"])
    new_row = _row(page, "#feed", item_id)
    expect(new_row).to_be_visible(timeout=SSE_DEADLINE_MS)
    assert time.monotonic() - started < SSE_DEADLINE_MS / 1000 + 0.5
    expect(new_row).to_contain_text(title)
    expect(page.locator("#feed [data-item-id]").first).to_have_attribute("data-item-id", str(item_id))

    # The project filter (filled from /api/projects) narrows the feed; "All" brings everything back.
    project_filter = page.locator("#project-filter")
    expect(project_filter.locator('option[value="viewer-test"]')).to_have_count(1)
    project_filter.select_option("viewer-test")
    expect(_row(page, "#feed", older)).to_be_hidden()
    expect(new_row).to_be_visible()
    page.locator("#kind-filter").select_option("summary")
    expect(new_row).to_be_hidden()
    page.locator("#kind-filter").select_option("")
    project_filter.select_option("")
    _wait_until_loaded(page)
    expect(_row(page, "#feed", older)).to_be_visible()

    # The search box runs a search and shows its strategy above the results.
    page.locator("#search-input").fill(MARKER)
    page.locator("#search-input").press("Enter")
    result_row = _row(page, "#results", item_id)
    expect(result_row).to_be_visible()
    expect(page.locator("#search-meta")).to_contain_text("strategy:")
    expect(page.locator("#results")).not_to_have_attribute("aria-busy", "true")

    # Clicking a row shows the full record in the side panel.
    result_row.click()
    detail = page.locator("#detail")
    expect(page.locator("#detail-heading")).to_have_text(title)
    expect(detail.locator('[data-field="text"]')).to_contain_text(text)
    expect(detail.locator('[data-field="facts"]')).to_contain_text(fact)
    expect(detail.locator('[data-field="concepts"] li')).to_have_text(["viewer", "sse"])
    expect(detail).to_contain_text("viewer-test")
    expect(page.locator("#delete-button")).to_be_visible()

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "viewer.png"), full_page=True)
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(ARTIFACTS / "viewer-dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")

    # Dismissing the confirmation keeps the memory.
    dialogs: list[str] = []

    def answer(accept: bool):
        def handler(dialog) -> None:
            dialogs.append(dialog.message)
            if accept:
                dialog.accept()
            else:
                dialog.dismiss()

        return handler

    page.once("dialog", answer(False))
    page.locator("#delete-button").click()
    expect(new_row).to_be_visible()
    assert len(dialogs) == 1 and title in dialogs[0]
    assert worker.get(f"/api/memory/{item_id}").status_code == 200

    # Accepting it deletes: gone from the feed, the results and the store.
    page.once("dialog", answer(True))
    page.locator("#delete-button").click()
    expect(page.locator(f'[data-item-id="{item_id}"]')).to_have_count(0)
    expect(page.locator("#delete-button")).to_be_hidden()
    assert len(dialogs) == 2
    assert worker.get(f"/api/memory/{item_id}").status_code == 404

    # A delete from another client reaches the page as an item_deleted event.
    assert worker.delete(f"/api/memory/{older}").status_code in (200, 204)
    expect(page.locator(f'[data-item-id="{older}"]')).to_have_count(0, timeout=SSE_DEADLINE_MS)

    assert page.evaluate("window.__pwned") is None
    assert page.errors == []  # type: ignore[attr-defined]


def test_viewer_narrow_dark_layout(worker: httpx.Client, page: Page) -> None:
    """On a phone-sized screen in dark mode the page still loads cleanly and the detail opens above the list."""
    item_id = _save(worker, project="viewer-test", title="Narrow layout check", text="Readable on a phone.",
                    type="note")
    page.set_viewport_size({"width": 390, "height": 844})
    page.emulate_media(color_scheme="dark")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    row = _row(page, "#feed", item_id)
    expect(row).to_be_visible()
    expect(page.locator("#detail")).to_be_hidden()
    row.click()
    expect(page.locator("#detail-heading")).to_have_text("Narrow layout check")
    expect(page.locator("#detail-heading")).to_be_focused()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "viewer-narrow-dark.png"), full_page=True)
    assert page.errors == []  # type: ignore[attr-defined]


def test_viewer_names_untitled_memories_and_bounds_long_titles(worker: httpx.Client, page: Page) -> None:
    """A memory without a title (a prompt has only its text) is named by its text, loaded or live; a 50,000
    character title neither makes a row a page long nor floods the heading and the confirmation."""
    untitled = _save(worker, project="viewer-test", text="Fix the login redirect loop in auth.py", type="note")
    long_title = "W" * 50_000 + " end"
    huge = _save(worker, project="viewer-test", title=long_title, text="a very long title", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    expect(_row(page, "#feed", untitled)).to_contain_text("Fix the login redirect loop in auth.py")

    live = _save(worker, project="viewer-test", text="Live note without a title", type="note")
    expect(_row(page, "#feed", live)).to_contain_text("Live note without a title", timeout=SSE_DEADLINE_MS)

    box = _row(page, "#feed", huge).bounding_box()
    assert box is not None and box["height"] < 200
    _row(page, "#feed", huge).click()
    expect(page.locator("#detail [data-field='title']")).to_have_count(1)
    assert len(page.locator("#detail-heading").inner_text()) <= 400
    assert page.locator("#detail [data-field='title'] .prose").inner_text() == long_title
    messages = _dialog_messages(page)
    page.locator("#delete-button").click()
    expect(_row(page, "#feed", huge)).to_be_visible()
    assert len(messages) == 1 and len(messages[0]) < 500
    assert page.errors == []  # type: ignore[attr-defined]


def test_viewer_search_error_shows_the_workers_reason(worker: httpx.Client, page: Page) -> None:
    """A refused search shows the worker's explanation, not its error code."""
    page.route("**/api/search?*query=*", lambda route: route.continue_(url=route.request.url + "&kind=bogus"))
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    page.locator("#search-input").fill("anything")
    page.locator("#search-input").press("Enter")
    expect(page.locator("#search-meta")).to_contain_text("Search failed")
    expect(page.locator("#search-meta")).to_contain_text("unknown kind 'bogus'")


def test_viewer_feed_loads_once_the_worker_is_ready(worker: httpx.Client, page: Page) -> None:
    """A page opened (or reconnected) while the worker still starts gets 503 for the feed; it asks again."""
    item_id = _save(worker, project="viewer-test", title="Waiting for readiness", text="x", type="note")
    refused: list[str] = []

    def not_ready_once(route: Any) -> None:
        if refused:
            route.continue_()
            return
        refused.append(route.request.url)
        route.fulfill(status=503, content_type="application/json", headers={"Retry-After": "1"},
                      body='{"error": "not_ready", "detail": "opening the store"}')

    page.route("**/api/search?*", not_ready_once)
    page.goto(str(worker.base_url.join("/")))
    expect(page.locator("#feed-meta")).to_contain_text("opening the store")
    expect(_row(page, "#feed", item_id)).to_be_visible()
    expect(page.locator("#feed-meta")).to_have_text("1 shown")
    assert len(refused) == 1


def test_viewer_project_filter_includes_merged_projects(worker: httpx.Client, page: Page, tmp_path: Path) -> None:
    """Memories of a project merged into another answer to both names, in the feed as in the worker."""
    from memcairn.store import Store

    old = _save(worker, project="viewer-old-name", title="Recorded before the rename", text="x", type="note")
    new = _save(worker, project="viewer-new-name", title="Recorded after the rename", text="y", type="note")
    store = Store(tmp_path / "worker-home" / "memcairn.db")
    try:
        store.merge_project("viewer-old-name", "viewer-new-name")
    finally:
        store.close()
    time.sleep(1.2)  # the worker rereads the projects table at most every second
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    project_filter = page.locator("#project-filter")
    expect(project_filter.locator('option[value="viewer-new-name"]')).to_have_count(1)
    project_filter.select_option("viewer-new-name")
    _wait_until_loaded(page)
    expect(_row(page, "#feed", new)).to_be_visible()
    expect(_row(page, "#feed", old)).to_be_visible()
    expect(page.locator("#feed-meta")).to_have_text("2 shown")


def test_viewer_reconnects_after_the_page_cache_restores_it(worker: httpx.Client, page: Page) -> None:
    """Leaving the page closes its stream; coming back through the back/forward cache opens it again."""
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    page.evaluate("window.dispatchEvent(new PageTransitionEvent('pagehide', { persisted: true }))")
    page.evaluate("window.dispatchEvent(new PageTransitionEvent('pageshow', { persisted: true }))")
    _wait_until_loaded(page)
    item_id = _save(worker, project="viewer-test", title="Saved after coming back", text="z", type="note")
    expect(_row(page, "#feed", item_id)).to_be_visible(timeout=SSE_DEADLINE_MS)


def test_viewer_delete_by_keyboard_keeps_the_focus_in_the_list(worker: httpx.Client, page: Page) -> None:
    """Enter on a row, Tab to Delete, Enter, confirm: the focus lands on the next row, also when the stream's
    item_deleted reaches the page before the DELETE answer does."""
    older = _save(worker, project="viewer-test", title="Stays", text="kept", type="note")
    newer = _save(worker, project="viewer-test", title="Goes", text="deleted", type="note")

    def answer_late(route: Any) -> None:
        response = route.fetch()
        time.sleep(0.5)  # the item_deleted event is on the page by now
        route.fulfill(response=response)

    page.route("**/api/memory/*", lambda route: answer_late(route) if route.request.method == "DELETE"
               else route.continue_())
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    _row(page, "#feed", newer).locator(".row-button").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#detail-heading")).to_have_text("Goes")
    expect(page.locator("#detail-heading")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.locator("#delete-button")).to_be_focused()
    page.once("dialog", lambda dialog: dialog.accept())
    page.keyboard.press("Enter")
    expect(page.locator(f'[data-item-id="{newer}"]')).to_have_count(0)
    expect(page.locator("#worker-status")).to_contain_text(f"Deleted memory #{newer}")
    expect(_row(page, "#feed", older).locator(".row-button")).to_be_focused()


def _feed_ids(page: Page) -> list[str]:
    return page.eval_on_selector_all("#feed > [data-item-id]", "rows => rows.map(r => r.dataset.itemId)")


def test_viewer_restart_keeps_the_feed_without_duplicates(worker: httpx.Client, page: Page) -> None:
    """A worker restart ends the stream; the page reconnects and catches up: what the feed showed stays (also
    past the first page of 50), what was saved meanwhile appears once, nothing twice."""
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    saved = [_save(worker, project="viewer-test", title=f"Live {n} {MARKER}", text=f"n{n}", type="note")
             for n in range(60)]
    expect(page.locator("#feed-meta")).to_have_text("60 shown", timeout=SSE_DEADLINE_MS * 2)
    worker.restart()  # type: ignore[attr-defined]
    after = _save(worker, project="viewer-test", title="Saved after the restart", text="late", type="note")
    expect(_row(page, "#feed", after)).to_be_visible(timeout=15_000)
    _wait_until_loaded(page)
    expect(page.locator("#feed-meta")).to_have_text("61 shown")
    ids = _feed_ids(page)
    assert len(ids) == len(set(ids))
    assert ids == [str(i) for i in sorted([*saved, after], reverse=True)]
    # The browser logs the requests refused (503) or unanswered while the worker restarts; nothing else.
    errors = page.errors  # type: ignore[attr-defined]
    assert [e for e in errors if not e.startswith("console: Failed to load resource")] == []


def test_viewer_filtered_feed_survives_a_flood_of_other_projects(worker: httpx.Client, page: Page) -> None:
    """A tab filtered to one project, left open while other projects write hundreds of memories: those never
    show, and they do not push the project's own memories out of the bounded feed."""
    mine = [_save(worker, project="viewer-mine", title=f"Mine {n}", text=f"m{n}", type="note") for n in range(5)]
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    page.locator("#project-filter").select_option("viewer-mine")
    _wait_until_loaded(page)
    expect(page.locator("#feed-meta")).to_have_text("5 shown")
    last = 0
    for n in range(320):
        last = _save(worker, project="viewer-flood", title=f"Flood {n}", text=f"f{n}", type="note")
    expect(page.locator(f'#feed [data-item-id="{last}"]')).to_have_count(1, timeout=SSE_DEADLINE_MS * 2)
    expect(_row(page, "#feed", last)).to_be_hidden()
    for item_id in mine:
        expect(_row(page, "#feed", item_id)).to_be_visible()
    assert page.locator("#feed > [data-item-id]").count() <= 300


def test_viewer_right_to_left_and_emoji_text(worker: httpx.Client, page: Page) -> None:
    """Right-to-left text is laid out right to left (its punctuation where its reader expects it), and a
    long title cut for a row never splits an emoji into a broken half."""
    rtl_title = "מחיקת המטמון נכשלה!"
    rtl = _save(worker, project="viewer-test", title=rtl_title, text="שלום עולם, זה טקסט.", type="note",
                facts=["עובדה אחת."])
    emoji = _save(worker, project="viewer-test", title="a" * 238 + "😀" * 20, text="emoji", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    direction = "el => getComputedStyle(el).direction"
    assert _row(page, "#feed", rtl).locator(".row-title").evaluate(direction) == "rtl"
    assert _row(page, "#feed", emoji).locator(".row-title").evaluate(direction) == "ltr"
    well_formed = "el => el.textContent.isWellFormed()"
    assert _row(page, "#feed", emoji).locator(".row-title").evaluate(well_formed)
    _row(page, "#feed", rtl).click()
    expect(page.locator("#detail-heading")).to_have_text(rtl_title)
    assert page.locator("#detail-heading").evaluate(direction) == "rtl"
    assert page.locator("#detail [data-field='text'] .prose").evaluate(direction) == "rtl"
    assert page.locator("#detail [data-field='facts'] li").evaluate(direction) == "rtl"
    _row(page, "#feed", emoji).click()
    expect(page.locator("#detail-heading")).to_contain_text("😀")
    assert page.locator("#detail-heading").evaluate(direction) == "ltr"
    assert page.locator("#detail-heading").evaluate(well_formed)


def test_viewer_long_unbroken_words_wrap_in_the_detail(worker: httpx.Client, page: Page) -> None:
    """A fact, concept or subtitle that is one long word (a hash, a URL) wraps instead of widening the panel."""
    word = "x" * 400
    item_id = _save(worker, project="viewer-test", title="Long words", subtitle=word, text="t", type="note",
                    facts=[word], concepts=[word])
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    _row(page, "#feed", item_id).click()
    expect(page.locator("#detail-heading")).to_have_text("Long words")
    detail = page.locator("#detail")
    assert detail.evaluate("el => el.scrollWidth <= el.clientWidth"), "the detail panel scrolls sideways"


def test_viewer_time_labels_follow_the_clock(worker: httpx.Client, page: Page) -> None:
    """A tab left open past midnight: a memory from yesterday no longer reads as a bare time of day."""
    page.clock.install(time=time.time())
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    item_id = _save(worker, project="viewer-test", title="Before midnight", text="t", type="note")
    label = _row(page, "#feed", item_id).locator("time")
    expect(label).to_have_text(re.compile(r"^\d\d:\d\d$"), timeout=SSE_DEADLINE_MS)
    page.clock.fast_forward("25:00:00")
    expect(label).not_to_have_text(re.compile(r"^\d\d:\d\d$"))


def test_viewer_long_project_name_does_not_widen_the_page(worker: httpx.Client, page: Page) -> None:
    """A project name of 200 characters without a space (the longest allowed) wraps inside its row."""
    long_project = "p" * 200
    item_id = _save(worker, project=long_project, title="Long project", text="t", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    expect(_row(page, "#feed", item_id)).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), "the page scrolls sideways"
    feed = page.locator("#feed")
    assert feed.evaluate("el => el.scrollWidth <= el.clientWidth")


def test_viewer_delete_moves_the_focus_past_hidden_rows(worker: httpx.Client, page: Page) -> None:
    """Deleting the last shown row of a filtered feed puts the focus on the shown row above it, skipping a
    live row of another project that the filter hides, not on the search box."""
    last = _save(worker, project="viewer-mine", title="Last of mine", text="goes", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    page.locator("#project-filter").select_option("viewer-mine")
    _wait_until_loaded(page)
    other = _save(worker, project="viewer-other", title="Not mine", text="hidden", type="note")
    expect(page.locator(f'#feed [data-item-id="{other}"]')).to_have_count(1, timeout=SSE_DEADLINE_MS)
    above = _save(worker, project="viewer-mine", title="Newest of mine", text="stays", type="note")
    expect(_row(page, "#feed", above)).to_be_visible(timeout=SSE_DEADLINE_MS)
    expect(_row(page, "#feed", other)).to_be_hidden()
    assert _feed_ids(page) == [str(above), str(other), str(last)]
    _row(page, "#feed", last).locator(".row-button").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#detail-heading")).to_have_text("Last of mine")
    page.keyboard.press("Tab")
    expect(page.locator("#delete-button")).to_be_focused()
    page.once("dialog", lambda dialog: dialog.accept())
    page.keyboard.press("Enter")
    expect(page.locator(f'[data-item-id="{last}"]')).to_have_count(0)
    expect(_row(page, "#feed", above).locator(".row-button")).to_be_focused()


def test_viewer_escape_returns_to_the_search_result(worker: httpx.Client, page: Page) -> None:
    """Opening a search result by keyboard and closing it with Escape puts the focus back on that result, not
    on the same memory further down in the feed."""
    item_id = _save(worker, project="viewer-test", title=f"Found by search {MARKER}", text="t", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    page.locator("#search-input").fill(MARKER)
    page.locator("#search-input").press("Enter")
    result = _row(page, "#results", item_id).locator(".row-button")
    expect(result).to_be_visible()
    result.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#detail-heading")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#delete-button")).to_be_hidden()
    expect(result).to_be_focused()


def test_viewer_search_box_takes_its_direction_from_the_query(worker: httpx.Client, page: Page) -> None:
    """A Hebrew or Arabic query is laid out right to left as it is typed; a Latin one stays left to right."""
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    box = page.locator("#search-input")
    direction = "el => getComputedStyle(el).direction"
    box.fill("מטמון נכשל!")
    assert box.evaluate(direction) == "rtl"
    box.fill("فشل التخزين؟")
    assert box.evaluate(direction) == "rtl"
    box.fill("cache failed!")
    assert box.evaluate(direction) == "ltr"


def test_viewer_search_runs_again_after_the_stream_reconnects(worker: httpx.Client, page: Page) -> None:
    """Results shown while the worker restarts are searched again once the stream is back: a memory saved
    while the page was cut off appears among them, one deleted meanwhile leaves them."""
    first = _save(worker, project="viewer-test", title=f"Before the restart {MARKER}", text="a", type="note")
    gone = _save(worker, project="viewer-test", title=f"Deleted while away {MARKER}", text="b", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    page.locator("#search-input").fill(MARKER)
    page.locator("#search-input").press("Enter")
    expect(_row(page, "#results", first)).to_be_visible()
    expect(_row(page, "#results", gone)).to_be_visible()
    _row(page, "#results", first).locator(".row-button").focus()

    # The page cannot reconnect until the memories are written, so no live event can bring the news.
    page.route("**/stream", lambda route: route.abort())
    worker.restart()  # type: ignore[attr-defined]
    expect(page.locator("#connection")).not_to_have_attribute("data-state", "live")
    late = _save(worker, project="viewer-test", title=f"Saved while away {MARKER}", text="c", type="note")
    assert worker.delete(f"/api/memory/{gone}").status_code in (200, 204)
    page.unroute("**/stream")

    expect(page.locator("#connection")).to_have_attribute("data-state", "live", timeout=15_000)
    expect(_row(page, "#results", late)).to_be_visible()
    expect(_row(page, "#results", gone)).to_have_count(0)
    expect(_row(page, "#results", first).locator(".row-button")).to_be_focused()
    expect(page.locator("#search-meta")).to_contain_text("2 results")


def test_viewer_delete_confirmation_isolates_a_right_to_left_title(worker: httpx.Client, page: Page) -> None:
    """The title in the confirmation stands on a line of its own (a paragraph of its own to the bidi algorithm):
    a Hebrew title ending in "!" keeps the "!" at its left end, and the rest of the message stays where English
    puts it, without invisible direction characters (tests/test_viewer_first_week.py)."""
    rtl_title = "מחיקת המטמון נכשלה!"
    item_id = _save(worker, project="viewer-test", title=rtl_title, text="t", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    _row(page, "#feed", item_id).click()
    expect(page.locator("#detail-heading")).to_have_text(rtl_title)
    messages = _dialog_messages(page)
    page.locator("#delete-button").click()
    expect(_row(page, "#feed", item_id)).to_be_visible()
    assert len(messages) == 1
    assert f"Delete memory #{item_id}?\n\n{rtl_title}\n\n" in messages[0]  # its own line: its own bidi paragraph
    assert worker.get(f"/api/memory/{item_id}").status_code == 200


def _clock_text(epoch: float, zone: str, pattern: str) -> str:
    return datetime.fromtimestamp(epoch, ZoneInfo(zone)).strftime(pattern)


def test_viewer_times_follow_a_change_of_time_zone(worker: httpx.Client, zoned_page: Page) -> None:
    """The machine moves to another time zone while the tab is open: the times shown (rows, their tooltips,
    the detail) follow once the tab is looked at again, and new rows use the new zone, without a reload."""
    page = zoned_page
    old = _save(worker, project="viewer-test", title="Saved in UTC", text="t", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    epoch = worker.get(f"/api/memory/{old}").json()["created_at_epoch"]
    epoch = epoch / 1000 if epoch > 1e11 else epoch
    label = _row(page, "#feed", old).locator("time")
    expect(label).to_have_text(re.compile(re.escape(_clock_text(epoch, "UTC", "%H:%M")) + "$"))
    _row(page, "#feed", old).click()
    created = page.locator("#detail .record-meta time").first
    expect(created).to_contain_text(_clock_text(epoch, "UTC", "%H:%M"))

    # India is 5:30 ahead of UTC: every minute of the label differs.
    zone = "Asia/Kolkata"
    page.set_time_zone(zone)  # type: ignore[attr-defined]
    assert page.evaluate("new Date(0).getHours()") == 5
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    kolkata = _clock_text(epoch, zone, "%H:%M")
    expect(label).to_have_text(re.compile(re.escape(kolkata) + "$"))
    assert kolkata in (label.get_attribute("title") or "")
    expect(created).to_contain_text(kolkata)

    # Zone changed again and a memory arrives before anything else happens: old and new rows agree.
    zone = "America/St_Johns"  # 3:30 (or 2:30) behind UTC
    page.set_time_zone(zone)  # type: ignore[attr-defined]
    new = _save(worker, project="viewer-test", title="Saved in Newfoundland", text="t", type="note")
    expect(_row(page, "#feed", new)).to_be_visible(timeout=SSE_DEADLINE_MS)
    new_epoch = worker.get(f"/api/memory/{new}").json()["created_at_epoch"]
    new_epoch = new_epoch / 1000 if new_epoch > 1e11 else new_epoch
    expect(_row(page, "#feed", new).locator("time")).to_have_text(
        re.compile(re.escape(_clock_text(new_epoch, zone, "%H:%M")) + "$"))
    expect(label).to_have_text(re.compile(re.escape(_clock_text(epoch, zone, "%H:%M")) + "$"))
    assert page.errors == []  # type: ignore[attr-defined]


LINES_JS = """el => {
  const lines = new Map();
  for (const text of el.childNodes) {
    if (text.nodeType !== Node.TEXT_NODE) continue;
    for (let i = 0; i < text.length; i++) {
      const range = document.createRange(); range.setStart(text, i); range.setEnd(text, i + 1);
      const rect = range.getClientRects()[0]; if (!rect) continue;
      const top = Math.round(rect.top); lines.set(top, (lines.get(top) || '') + text.data[i]);
    }
  }
  return Array.from(lines.values());
}"""


def test_viewer_detail_heading_wraps_between_words_not_around_a_backtick(worker: httpx.Client, page: Page) -> None:
    titles = ["Ran `cargo test --workspace 2>&1 | tail -n 40`: 34 passed, 0 failed after the fix in `src/lexer.rs`",
              "Ran `git add .gitignore && git commit -m 'Add gitignore'`", "Command failed (exit 1): `npm test`",
              "Edited `src/memcairn/worker/static/app.js`", "`pytest -q tests/test_viewer_browser.py::test_x`",
              "Read `/home/dev/projects/calc/src/math_utils.py` and `tests/test_math_utils.py`"]
    ids = [_save(worker, project="viewer-test", title=t, text="t", type="discovery") for t in titles]
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    heading = page.locator("#detail-heading")
    bad = []
    for title, item_id in zip(titles, ids, strict=True):
        for width in range(360, 1040, 40):
            page.set_viewport_size({"width": width, "height": 860})
            _row(page, "#feed", item_id).click()
            expect(heading).to_have_text(title)
            lines = heading.evaluate(LINES_JS)
            assert "".join(lines) == title
            # no line of punctuation alone (a lone backtick), no path or word cut between two letters
            bad += [(width, lines) for line in lines if not any(c.isalnum() for c in line)]
            bad += [(width, lines) for a, b in itertools.pairwise(lines) if a[-1:].isalnum() and b[:1].isalnum()]
    assert bad == []


def test_viewer_project_filter_leaves_out_projects_without_memories(worker: httpx.Client, page: Page) -> None:
    """A SessionStart in a folder with no memories names a project; the filter lists it once it holds one."""
    worker.post("/api/sessions/init", json={"session_id": "empty-start", "project": "viewer-empty-proj",
                                            "event": "session_start", "platform_source": "claude-code"})
    kept = _save(worker, project="viewer-test", title="A memory", text="t", type="note")
    page.goto(str(worker.base_url.join("/")))
    _wait_until_loaded(page)
    expect(_row(page, "#feed", kept)).to_be_visible()
    options = page.locator("#project-filter option")
    expect(page.locator('#project-filter option[value="viewer-test"]')).to_have_count(1)
    assert "viewer-empty-proj" not in " ".join(options.all_text_contents())
