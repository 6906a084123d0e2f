"""The capture pipeline on real SQLite files: queued hook events become prompts, observations and summaries
exactly once; private turns, exclusions and model failures; the sample transcripts replayed end to end."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from capture_queue import SESSION, body, edit, send
from click.testing import CliRunner

from memcairn.capture.admission import admit
from memcairn.capture.pipeline import CapturePipeline
from memcairn.capture.records import Compressed, CompressionFailed, Observation, ToolCall, Turn
from memcairn.cli.app import cli
from memcairn.context.build import render_context
from memcairn.core.models import ItemFilter
from memcairn.mirror.sync import MirrorSync
from memcairn.search import SearchRequest, SearchService
from memcairn.search.result import SearchResult
from memcairn.store import Store
from memcairn.transfer.importer import import_transcripts
from memcairn.vectors.fake import HashEmbedder
from memcairn.vectors.memory import InMemoryIndex
from memcairn.wire.config import Settings, load_settings
from memcairn.wire.protocol import NOTICE_PREFIX

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
TRANSCRIPTS = sorted(FIXTURES.glob("*.jsonl"))
def bash(tool_use_id: str, command: str, output: str) -> dict[str, object]:
    return {"tool_name": "Bash", "tool_use_id": tool_use_id, "tool_input": {"command": command},
            "tool_response": {"stdout": output, "stderr": "", "interrupted": False}}


def one_turn(store: Store, settings: Settings) -> None:
    send(store, settings, "session_start")
    send(store, settings, "user_prompt", prompt="Fix the rounding bug in the cart total")
    send(store, settings, "tool_use", **bash("t1", "pytest tests/test_cart.py", "1 failed, 4 passed in 0.2s"))
    send(store, settings, "tool_use", **edit("t2"))
    send(store, settings, "tool_use", **bash("t3", "pytest tests/test_cart.py", "5 passed in 0.2s"))
    send(store, settings, "stop", last_assistant_message="Fixed: totals use Decimal now. Next: check refunds.")


def kinds(store: Store) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in store.list_items(ItemFilter(), limit=1000):
        out[item.kind] = out.get(item.kind, 0) + 1
    return out


def test_a_turn_becomes_a_prompt_observations_and_a_summary(store: Store, settings: Settings) -> None:
    one_turn(store, settings)
    report = CapturePipeline(store, settings).process_pending()
    assert report.events == 6 and report.failed == 0
    assert store.ingest_counts()["pending"] == 0
    found = kinds(store)
    assert found["prompt"] == 1 and found["summary"] == 1 and found["observation"] >= 1
    observations = store.list_items(ItemFilter(kinds=["observation"]), limit=50)
    assert any("cart.py" in " ".join(o.files_modified) for o in observations)
    assert all(o.session == SESSION and o.prompt_number == 1 and o.project == "shop" for o in observations)
    summary = store.list_items(ItemFilter(kinds=["summary"]), limit=1)[0]
    assert "rounding" in (summary.request or "")
    assert summary.metadata["compressor"] == "offline"
    hits = store.keyword_search("cart total rounding", ItemFilter(projects=["shop"]))
    assert hits, "the turn is findable by topic"


def test_a_session_that_changes_directory_keeps_its_project(store: Store, settings: Settings) -> None:
    """An agent that cds into another repository mid-session: its later events name that project, yet the
    session (and the store's rule that an item's session belongs to the item's project) stays in the first."""
    moved = {"cwd": "/work/api", "project": "api", "projects": ["api"]}
    send(store, settings, "session_start")
    send(store, settings, "user_prompt", prompt="Fix the rounding bug in the cart total")
    send(store, settings, "tool_use", **moved, **edit("m1", "/work/api/prices.py"))
    send(store, settings, "user_prompt", **moved, prompt="Now the prices endpoint")
    send(store, settings, "stop", **moved, last_assistant_message="Prices use Decimal too.")
    send(store, settings, "session_end", **moved)
    report = CapturePipeline(store, settings).process_pending()
    assert report.failed == 0 and store.ingest_counts()["pending"] == 0
    items = store.list_items(ItemFilter(), limit=50)
    assert {i.project for i in items} == {"shop"} and {i.session for i in items} == {SESSION}
    assert kinds(store)["prompt"] == 2 and kinds(store)["summary"] == 1
    assert any("prices.py" in " ".join(i.files_modified) for i in items)


def test_processing_twice_changes_nothing(store: Store, settings: Settings) -> None:
    one_turn(store, settings)
    pipeline = CapturePipeline(store, settings)
    pipeline.process_pending()
    before = store.stats()["items"]
    again = CapturePipeline(store, settings).process_pending()
    assert again.events == 0 and store.stats()["items"] == before


def test_a_repeated_hook_is_recorded_once(store: Store, settings: Settings) -> None:
    first = send(store, settings, "tool_use", **edit("t9"))
    second = send(store, settings, "tool_use", **edit("t9"))
    assert first is not None and second == (first[0], False)
    p1 = send(store, settings, "user_prompt", prompt="same words")
    p2 = send(store, settings, "user_prompt", prompt="same words")
    assert p1 is not None and p2 == (p1[0], False)


def test_events_another_processor_finished_are_not_written_twice(store: Store, settings: Settings) -> None:
    one_turn(store, settings)
    pending = store.pending_ingest_events()
    prompt = next(e for e in pending if e.kind == "user_prompt")
    CapturePipeline(store, settings).process_pending()
    items = store.stats()["items"]
    # a second processor that read the same events before the first committed
    assert store.complete_ingest([prompt.id], []) is None
    assert store.stats()["items"] == items


def test_a_crash_before_commit_leaves_events_pending_and_a_restart_completes_them(store: Store,
                                                                                   settings: Settings) -> None:
    one_turn(store, settings)

    class Boom(Exception):
        pass

    pipeline = CapturePipeline(store, settings)
    real = store.complete_ingest
    calls = {"n": 0}

    def crash_on_third(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 3:
            raise Boom("power cut")
        return real(*args, **kwargs)

    store.complete_ingest = crash_on_third  # type: ignore[method-assign]
    with pytest.raises(Boom):  # the guard counts it as a failure; make the crash escape instead
        pipeline._guard = lambda handler, events, report: handler(events, report)  # type: ignore[method-assign]
        pipeline.process_pending()
    store.complete_ingest = real  # type: ignore[method-assign]
    done = store.ingest_counts()
    assert done["done"] == 2 and done["pending"] == 4
    CapturePipeline(store, settings).process_pending()
    assert store.ingest_counts()["pending"] == 0
    assert kinds(store)["prompt"] == 1 and kinds(store)["summary"] == 1


def test_a_private_prompt_stores_nothing_of_its_turn(store: Store, settings: Settings) -> None:
    send(store, settings, "user_prompt", prompt="<private>rotate the prod keys</private>")
    send(store, settings, "tool_use", **edit("p1", "/work/shop/secrets.py"))
    send(store, settings, "stop", last_assistant_message="Done rotating.")
    raw = [e.payload for e in store.pending_ingest_events()]
    assert "rotate the prod keys" not in json.dumps(raw)
    CapturePipeline(store, settings).process_pending()
    assert store.stats()["items"] == 0
    assert store.session_prompt_count("claude-code", SESSION) == 1  # numbering stays right


def test_private_parts_and_secrets_never_reach_the_queue(store: Store, settings: Settings) -> None:
    key = "sk-ant-" + "api03-" + "Q" * 40
    send(store, settings, "user_prompt", prompt="Deploy it <private>my home address</private> now")
    send(store, settings, "tool_use", **bash("s1", f"export ANTHROPIC_API_KEY={key}", ""))
    dumped = json.dumps([e.payload for e in store.pending_ingest_events()])
    assert "home address" not in dumped and key not in dumped
    CapturePipeline(store, settings).process_pending()
    everything = json.dumps([i.to_dict() for i in store.list_items(ItemFilter(), limit=100)])
    assert "home address" not in everything and key not in everything


def test_excluded_projects_and_skipped_tools_are_not_captured(store: Store, settings: Settings) -> None:
    excluded = replace(settings, exclude_projects="sh*", skip_tools="Bash")
    assert send(store, excluded, "user_prompt", prompt="anything") is None
    allowed = replace(settings, skip_tools="Bash")
    assert send(store, allowed, "tool_use", **bash("b1", "ls", "a b")) is None
    assert send(store, allowed, "tool_use", **edit("e1")) is not None



def test_exclusions_apply_to_the_project_the_pipeline_files_an_event_under(tmp_path: Path,
                                                                           settings: Settings) -> None:
    """An event that names its project with stray spaces, or only by its directory, is still excluded."""
    (tmp_path / "secret").mkdir()
    excluded = replace(settings, exclude_projects="secret")
    spaced = {"event": "user_prompt", "session_id": "x1", "project": "secret ", "prompt": "hello"}
    by_cwd = {"event": "user_prompt", "session_id": "x2", "cwd": str(tmp_path / "secret"), "prompt": "hello"}
    for sent in (spaced, by_cwd):
        assert admit("session_init", sent, excluded).body is None, sent
        assert admit("session_init", sent, settings).body is not None  # nothing excluded: both are captured
    named = {**by_cwd, "project": "shop"}  # a named project wins over the directory, as in the pipeline
    assert admit("session_init", named, excluded).body is not None

def test_tool_events_wait_for_their_batch_then_flush(store: Store, settings: Settings) -> None:
    waiting = replace(settings, capture_batch_wait_seconds=3600)
    send(store, waiting, "user_prompt", prompt="Refactor the cart")
    send(store, waiting, "tool_use", **edit("w1"))
    report = CapturePipeline(store, waiting).process_pending()
    assert report.waiting == 1 and store.ingest_counts()["pending"] == 1
    send(store, waiting, "stop", last_assistant_message="ok")
    CapturePipeline(store, waiting).process_pending()  # the stop ends the turn: the batch goes first
    assert store.ingest_counts()["pending"] == 0
    assert kinds(store)["observation"] >= 1


def test_a_turn_that_goes_on_after_its_stop_keeps_one_summary_the_later_one(store: Store, settings: Settings) -> None:
    """A stop hook can make the agent continue after Stop; the turn stops again with ``stop_hook_active``."""
    one_turn(store, settings)
    CapturePipeline(store, settings).process_pending()
    first = store.list_items(ItemFilter(kinds=["summary"]), limit=5)
    assert len(first) == 1
    send(store, settings, "tool_use", **edit("t4", "/work/shop/refunds.py"))
    send(store, settings, "stop", stop_hook_active=True,
         last_assistant_message="Refunds now round with Decimal too; both totals are covered by tests.")
    report = CapturePipeline(store, settings).process_pending()
    assert report.failed == 0
    summaries = store.list_items(ItemFilter(kinds=["summary"]), limit=5)
    assert len(summaries) == 1 and summaries[0].id != first[0].id
    assert summaries[0].prompt_number == 1
    assert "refunds.py" in " ".join(summaries[0].files_modified)
    # the earlier one is gone from keyword search too (both were about the rounding bug)
    assert {i for i, _ in store.keyword_ids("rounding", ItemFilter(kinds=["summary"]))} == {summaries[0].id}
    # the next turn's summary is its own
    send(store, settings, "user_prompt", prompt="Now add a coupon field")
    send(store, settings, "tool_use", **edit("t5", "/work/shop/checkout.py"))
    send(store, settings, "stop", last_assistant_message="Coupon field added.")
    CapturePipeline(store, settings).process_pending()
    assert sorted(s.prompt_number for s in store.list_items(ItemFilter(kinds=["summary"]), limit=5)) == [1, 2]


def test_a_second_stop_without_stop_hook_active_replaces_nothing(store: Store, settings: Settings) -> None:
    """Its prompt may have been lost (a hook that failed): it must not replace the previous turn's summary."""
    one_turn(store, settings)
    CapturePipeline(store, settings).process_pending()
    send(store, settings, "tool_use", **edit("t6", "/work/shop/coupons.py"))
    send(store, settings, "stop", last_assistant_message="Coupons validated.")
    CapturePipeline(store, settings).process_pending()
    assert kinds(store)["summary"] == 2


def test_a_continued_turn_whose_prompt_was_lost_keeps_the_previous_turn_s_summary(store: Store,
                                                                                   settings: Settings) -> None:
    """Turn 2's prompt never reached the queue, so its summaries share turn 1's number: a Stop with
    ``stop_hook_active`` supersedes only its own turn's earlier summary, never turn 1's."""
    one_turn(store, settings)
    CapturePipeline(store, settings).process_pending()
    turn_one = store.list_items(ItemFilter(kinds=["summary"]), limit=5)
    send(store, settings, "tool_use", **edit("t7", "/work/shop/coupons.py"))
    send(store, settings, "stop", last_assistant_message="Coupons validated.")
    send(store, settings, "tool_use", **edit("t8", "/work/shop/coupons.py"))
    send(store, settings, "stop", stop_hook_active=True, last_assistant_message="Coupons validated and tested.")
    assert CapturePipeline(store, settings).process_pending().failed == 0
    summaries = store.list_items(ItemFilter(kinds=["summary"]), order="oldest", limit=5)
    assert [s.id for s in summaries][:1] == [turn_one[0].id] and len(summaries) == 2
    assert "coupons.py" in summaries[1].files_modified


def test_a_continued_turn_of_a_session_without_prompts_keeps_one_summary(store: Store, settings: Settings) -> None:
    """No prompt ever reached the queue (no prompt hook): the turn has no number, and still one summary."""
    send(store, settings, "tool_use", **edit("n1", "/work/shop/cart.py"))
    send(store, settings, "stop", last_assistant_message="Totals use Decimal.")
    CapturePipeline(store, settings).process_pending()
    assert kinds(store)["summary"] == 1
    send(store, settings, "tool_use", **edit("n2", "/work/shop/refunds.py"))
    send(store, settings, "stop", stop_hook_active=True, last_assistant_message="Refunds use Decimal too.")
    assert CapturePipeline(store, settings).process_pending().failed == 0
    assert kinds(store)["summary"] == 1


def test_a_session_end_without_stop_still_summarises_the_last_turn(store: Store, settings: Settings) -> None:
    send(store, settings, "user_prompt", prompt="Add a coupon field to checkout")
    send(store, settings, "tool_use", **edit("c1", "/work/shop/checkout.py"))
    send(store, settings, "session_end", reason="exit")
    CapturePipeline(store, settings).process_pending()
    assert kinds(store).get("summary") == 1


def session_row(store: Store) -> dict[str, object]:
    row = store._conn.execute("SELECT * FROM sessions WHERE platform_source = 'claude-code' AND agent_session_id = ?",
                              (SESSION,)).fetchone()
    return dict(row) if row is not None else {}


def test_a_session_end_marks_the_session_ended_with_its_event(store: Store, settings: Settings) -> None:
    one_turn(store, settings)
    CapturePipeline(store, settings).process_pending()
    assert session_row(store)["status"] == "active" and session_row(store)["ended_at_epoch"] is None
    send(store, settings, "session_end", reason="prompt_input_exit", timestamp_ms=1_790_000_000_000)
    CapturePipeline(store, settings).process_pending()
    row = session_row(store)
    assert row["status"] == "completed" and row["ended_at_epoch"] == 1_790_000_000_000
    assert store.ingest_counts() == {"pending": 0, "done": 7, "failed": 0}


def test_a_crash_right_after_a_session_end_commits_leaves_the_session_ended(store: Store,
                                                                            settings: Settings) -> None:
    """The event's done mark and the session's end commit together: nothing is left for a crash to split."""
    send(store, settings, "user_prompt", prompt="Add a coupon field to checkout")
    send(store, settings, "session_end", reason="exit", timestamp_ms=1_790_000_000_000)

    class PowerCut(BaseException):  # not an Exception: the pipeline's guard must not swallow it
        pass

    real = store.complete_ingest

    def commit_then_die(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)
        if store.ingest_counts()["pending"] == 0:  # the session end's commit went through
            raise PowerCut
        return result

    store.complete_ingest = commit_then_die  # type: ignore[method-assign]
    with pytest.raises(PowerCut):
        CapturePipeline(store, settings).process_pending()
    store.complete_ingest = real  # type: ignore[method-assign]
    assert store.ingest_counts()["pending"] == 0  # done: a restart will not look at it again
    row = session_row(store)
    assert row["status"] == "completed" and row["ended_at_epoch"] == 1_790_000_000_000
    assert CapturePipeline(store, settings).process_pending().events == 0


def test_a_session_end_of_a_session_never_seen_creates_it_ended(store: Store, settings: Settings) -> None:
    send(store, settings, "session_end", reason="exit")
    CapturePipeline(store, settings).process_pending()
    row = session_row(store)
    assert row["status"] == "completed" and row["ended_at_epoch"] is not None
    assert store.projects()[0].name == "shop"


class FailingModel:
    name = "anthropic"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def observe(self, turn: Turn, calls: Sequence[ToolCall]) -> Compressed:
        raise CompressionFailed(self.reason, "HTTP 429 rate_limit_error")

    def summarize(self, turn: Turn, observations: Sequence[Observation]) -> Compressed:
        raise CompressionFailed(self.reason, "HTTP 429 rate_limit_error")


def test_a_failing_model_falls_back_to_the_offline_extractor_and_says_so(store: Store, settings: Settings) -> None:
    one_turn(store, settings)
    report = CapturePipeline(store, settings, compressor=FailingModel("quota")).process_pending()
    assert report.fallbacks >= 2 and set(report.fallback_reasons) == {"quota"}
    items = store.list_items(ItemFilter(kinds=["observation", "summary"]), limit=50)
    assert items and all((i.metadata["compressor"], i.metadata["fallback_reason"]) == ("offline", "quota")
                         for i in items)
    text = render_context(store, settings, projects=["shop"], notices=store.take_capture_notices(["shop"]))
    assert text.startswith(NOTICE_PREFIX) and "rate limit" in text
    assert "(HTTP 429 rate_limit_error)" in text  # the backend's own words, not only "doctor shows details"
    assert len(text) <= settings.context_token_budget * 4
    later = store.take_capture_notices(["shop"])  # shown again only within a minute (both SessionStart calls)
    assert later and store.take_capture_notices(["other"]) == []  # a notice belongs to its project


class GoodModel:
    name = "anthropic"

    def observe(self, turn: Turn, calls: Sequence[ToolCall]) -> Compressed:
        return Compressed(observations=[Observation(type="bugfix", title="Cart totals use Decimal",
                                                    narrative="Rounding fixed.", files_modified=("cart.py",))])

    def summarize(self, turn: Turn, observations: Sequence[Observation]) -> Compressed:
        return Compressed(summary=None)


def test_a_model_result_is_stored_with_its_compressor(store: Store, settings: Settings) -> None:
    one_turn(store, settings)
    CapturePipeline(store, settings, compressor=GoodModel()).process_pending()
    titles = [i.title for i in store.list_items(ItemFilter(kinds=["observation"]), limit=10)]
    assert titles == ["Cart totals use Decimal"]
    assert "summary" not in kinds(store)


def test_the_sample_transcripts_replay_end_to_end(store: Store, settings: Settings, tmp_path: Path) -> None:
    report = import_transcripts(store, settings, TRANSCRIPTS)
    assert report.files == 3 and report.skipped_lines == 0
    assert report.prompts == 3 and report.summaries == 3 and report.observations >= 4  # episodes, not steps
    assert store.ingest_counts()["pending"] == 0 and store.ingest_counts()["failed"] == 0
    sessions = {i.project: i.session for i in store.list_items(ItemFilter(kinds=["prompt"]), limit=10)}
    coverage, hello, port = (sessions[p] for p in ("tmpw6sk2trg", "tmp74wiyiny", "tmpqwh7888i"))
    mirror = MirrorSync(store, InMemoryIndex(384), HashEmbedder(), index_key="replay")
    mirror.sync_pending()
    keyword, hybrid = SearchService(store), SearchService(store, mirror)

    def titles(result: SearchResult) -> list[str | None]:
        return [h.item.title for h in result.hits]

    # by file: what the sessions did to a file they really edited
    by_file = keyword.search(SearchRequest(files=["src/math_utils.py"], kinds=["observation"], limit=10))
    edit = next(h.item for h in by_file.hits if h.item.title == "Committed: Add multiply_numbers function with test")
    assert (edit.type, edit.files_modified, edit.session, edit.prompt_number) == (
        "change", ["src/math_utils.py", "tests/test_math_utils.py"], coverage, 1)
    assert "edited src/math_utils.py: added multiply_numbers" in edit.facts
    assert any("multiply_numbers" in fact for fact in edit.facts) or "multiply_numbers" in (edit.narrative or "")
    script = keyword.search(SearchRequest(files=["hello.sh"], limit=10))
    assert ("observation", "feature", "Created hello.sh") in {(h.item.kind, h.item.type, h.item.title)
                                                              for h in script.hits}
    created = next(h.item for h in script.hits if h.item.title == "Created hello.sh")
    assert "ran `chmod +x hello.sh && ./hello.sh` → ok: Hello world" in created.facts  # one episode
    assert created.files_modified == ["hello.sh"] and created.session == hello
    summary = next(h.item for h in script.hits if h.item.kind == "summary")
    assert summary.request and "hello.sh" in summary.request and summary.files_modified == ["hello.sh"]
    # by topic: keyword and hybrid queries about what a session did put it at the top
    for service in (keyword, hybrid):
        multiply = service.search(SearchRequest(query="multiply numbers", limit=3))
        assert multiply.strategy == ("hybrid" if service is hybrid else "keyword")
        assert "Committed: Add multiply_numbers function with test" in titles(multiply)
        coverage_run = service.search(SearchRequest(query="llvm-cov coverage", limit=3))
        assert coverage_run.hits[0].item.session == port
        ported = [h.item for h in coverage_run.hits if h.item.kind == "observation"]
        assert any(fact.startswith("ran `cargo llvm-cov") for o in ported for fact in o.facts)  # how it was verified
        shell = service.search(SearchRequest(query="shell script that prints hello world", limit=3))
        assert shell.hits[0].item.kind == "summary" and shell.hits[0].item.session == hello
        assert "Created hello.sh" in titles(shell)
    again = import_transcripts(store, settings, TRANSCRIPTS)
    assert (again.events, again.observations, again.summaries, again.prompts) == (0, 0, 0, 0)


def test_reimport_after_the_queue_was_pruned_adds_nothing(store: Store, settings: Settings) -> None:
    import_transcripts(store, settings, TRANSCRIPTS[:1])
    items = store.stats()["items"]
    assert store.prune_ingest_events(10 ** 15) > 0
    again = import_transcripts(store, settings, TRANSCRIPTS[:1])
    assert again.events > 0 and store.stats()["items"] == items


def test_the_background_runner_prunes_processed_events_past_retention_hourly(store: Store,
                                                                             settings: Settings) -> None:
    from memcairn.capture.background import PRUNE_EVERY_SECONDS, CaptureRunner

    day_ms = 86_400_000
    one_turn(store, settings)
    CapturePipeline(store, settings).process_pending()
    failed_id, _ = store.enqueue_ingest_event(SESSION, "claude-code", "observation", body("tool_use", **edit("f1")),
                                              "f1")
    store.mark_ingest_event(failed_id, "failed", error="kept for doctor")
    ids = [r[0] for r in store._conn.execute("SELECT id FROM ingest_events WHERE status = 'done' ORDER BY id")]
    now_ms = int(time.time() * 1000)

    def age(event_ids: list[int], days: float) -> None:
        marks = ",".join("?" * len(event_ids))
        store._conn.execute(f"UPDATE ingest_events SET updated_at_epoch = ? WHERE id IN ({marks})",
                            (now_ms - int(days * day_ms), *event_ids))
        store._conn.commit()

    age(ids[:2], 8)  # past the 7-day retention
    age(ids[2:4], 6.9)  # within it
    age([failed_id], 30)  # failed events stay whatever their age (doctor --fix requeues them)
    clock = [time.time()]
    runner = CaptureRunner(CapturePipeline(store, settings), clock=lambda: clock[0])
    runner.start()
    try:
        assert runner.wait_idle(10)
        left = {r[0]: r[1] for r in store._conn.execute("SELECT id, status FROM ingest_events")}
        assert set(left) == {*ids[2:], failed_id} and left[failed_id] == "failed"
        # within the hour nothing more is pruned, even events that have aged past the retention meanwhile
        age(ids[2:4], 7.5)
        runner.nudge()
        assert runner.wait_idle(10)
        assert {r[0] for r in store._conn.execute("SELECT id FROM ingest_events")} == {*ids[2:], failed_id}
        clock[0] += PRUNE_EVERY_SECONDS + 1  # an hour later
        runner.nudge()
        assert runner.wait_idle(10)
        assert {r[0] for r in store._conn.execute("SELECT id FROM ingest_events")} == {*ids[4:], failed_id}
        assert store.ingest_counts() == {"pending": 0, "done": len(ids) - 4, "failed": 1}
    finally:
        runner.stop(5)


def test_import_transcripts_cli_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_HOME", str(tmp_path / "home"))
    copies = []
    for path in TRANSCRIPTS:
        shutil.copy(path, tmp_path / path.name)
        copies.append(str(tmp_path / path.name))
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"not json\n' + TRANSCRIPTS[0].read_text(encoding="utf-8"), encoding="utf-8")
    runner = CliRunner()
    first = runner.invoke(cli, ["import", "transcripts", *copies, str(bad), "--json"])
    assert first.exit_code == 0, first.output
    data = json.loads(first.output)
    assert set(data) >= {"files", "events", "observations", "summaries", "prompts", "skipped_lines"}
    assert data["files"] == 4 and data["skipped_lines"] == 1 and data["prompts"] == 3
    second = runner.invoke(cli, ["import", "transcripts", *copies, "--json"])
    again = json.loads(second.output)
    assert (again["events"], again["observations"], again["summaries"], again["prompts"]) == (0, 0, 0, 0)


def test_import_transcripts_shows_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """Without --json, a person at a terminal sees the import advance file by file (on stderr)."""
    import os
    import pty
    import subprocess
    import sys

    env = {**os.environ, "MEMCAIRN_HOME": str(tmp_path / "home"), "MEMCAIRN_EMBEDDING_MODEL": "hash",
           "MEMCAIRN_WORKER_AUTOSTART": "0", "COLUMNS": "100"}
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "memcairn", "import", "transcripts", *map(str, TRANSCRIPTS)],
                              env=env, stdout=subprocess.PIPE, stderr=follower, timeout=120)
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: everything was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0
    text = shown.decode(errors="replace")
    drawn = re.findall(r"importing transcripts\s+\[[#-]+\]\s+(\d+)%", text)
    assert drawn[0] == "0" and drawn[-1] == "100" and len(drawn) == len(TRANSCRIPTS) + 1  # once per file
    assert b"imported 3 transcript files: 3 prompts" in done.stdout


def test_doctor_shows_the_queue_and_requeues_failed_events(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCAIRN_HOME", str(tmp_path / "home"))
    cfg = load_settings()
    with Store(cfg.db_path) as store:
        event_id, _ = store.enqueue_ingest_event(SESSION, "claude-code", "observation", body("tool_use", **edit("d1")),
                                                 "d1")
        store.mark_ingest_event(event_id, "failed", error="ValueError: boom")
        store.add_capture_notice("llm_auth", "memory capture: the anthropic model backend was refused", "shop")
    runner = CliRunner()
    seen = runner.invoke(cli, ["doctor"])
    assert seen.exit_code == 1
    assert "[FAIL] failed capture events: event 1 (observation): ValueError: boom" in seen.output
    assert "[WARN] capture notice: memory capture: the anthropic model backend was refused" in seen.output
    assert "[ok  ] capture queue: 0 pending, 0 processed, 1 failed" in seen.output
    fixed = runner.invoke(cli, ["doctor", "--fix"])
    assert "[FIXD] failed capture events: requeued 1" in fixed.output
    with Store(cfg.db_path) as store:
        assert store.ingest_counts()["pending"] == 1


def test_a_prompt_over_the_field_limit_is_cut_not_lost(store: Store, settings: Settings) -> None:
    """The ingest route takes bodies up to 1 MiB, the store 256 KiB a field: a long pasted prompt must not fail."""
    from memcairn.store.validation import MAX_FIELD_BYTES

    prompt = "START " + "ünïcödé log line\n" * 30_000 + " FINISH"
    assert len(prompt.encode("utf-8")) > MAX_FIELD_BYTES
    send(store, settings, "user_prompt", prompt=prompt)
    report = CapturePipeline(store, settings).drain()
    assert report.failed == 0 and store.ingest_counts()["failed"] == 0
    [item] = store.list_items(ItemFilter(kinds=["prompt"]), limit=10)
    assert len(item.text.encode("utf-8")) <= MAX_FIELD_BYTES
    assert item.text.startswith("START ") and item.text.endswith(" FINISH") and "[cut " in item.text


def test_a_project_named_by_a_long_directory_is_not_lost(store: Store, settings: Settings) -> None:
    """Only ``cwd`` given (the route allows 4096 characters) whose last part is longer than a project name may be."""
    from memcairn.store.validation import MAX_PROJECT_CHARS

    long_cwd = "/nowhere/" + "d" * 240
    admitted = admit("session_init", {"event": "user_prompt", "session_id": "lc", "cwd": long_cwd,
                                      "platform_source": "claude-code", "prompt": "hello from a long path"}, settings)
    assert admitted.body is not None
    store.enqueue_ingest_event("lc", "claude-code", "session_init", admitted.body)
    CapturePipeline(store, settings).drain()
    assert store.ingest_counts()["failed"] == 0
    [item] = store.list_items(ItemFilter(kinds=["prompt"]), limit=10)
    assert item.project == "d" * MAX_PROJECT_CHARS


def _transcript_line(second: int, kind: str, content: object) -> str:
    """One Claude Code transcript line of session ``live-1`` (its uuid and time named by ``second``)."""
    return json.dumps({"type": kind, "sessionId": "live-1", "cwd": "/work/shop", "uuid": f"{kind}-{second}",
                       "timestamp": f"2026-03-01T10:00:{second:02d}Z",
                       "message": {"role": kind, "id": f"m-{second}", "content": content}})


def test_a_live_transcript_imported_twice_summarises_each_turn_once(store: Store, settings: Settings,
                                                                    tmp_path: Path) -> None:
    """``memcairn import transcripts`` run from inside a running session, then again later: the turn that
    was still going at the first import is not summarised a second time."""
    def run(second: int, tool_use_id: str) -> str:
        return _transcript_line(second, "assistant", [{"type": "tool_use", "id": tool_use_id, "name": "Bash",
                                                       "input": {"command": "pytest -q"}}])

    def result(second: int, tool_use_id: str, output: str) -> str:
        return _transcript_line(second, "user", [{"type": "tool_result", "tool_use_id": tool_use_id,
                                                  "content": output}])

    lines = [_transcript_line(1, "user", "Fix the rounding bug"), run(2, "t1"), result(3, "t1", "1 failed")]
    path = tmp_path / "live-1.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    import_transcripts(store, settings, [path])
    lines += [run(4, "t2"), result(5, "t2", "3 passed"), _transcript_line(6, "assistant", "Fixed."),
              _transcript_line(7, "user", "Now the refunds"), _transcript_line(8, "assistant", "Done.")]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    import_transcripts(store, settings, [path])
    summaries = store.list_items(ItemFilter(kinds=["summary"]), limit=10)
    assert sorted(s.prompt_number or 0 for s in summaries) == [1, 2]


def test_a_replayed_result_marked_is_error_is_a_failure_even_when_its_text_does_not_say_so(
        store: Store, settings: Settings) -> None:
    """A transcript's tool_result block may carry is_error with a plain text (``transcripts.py`` puts the flag
    beside the response): the observation must not tell the run as a success."""
    send(store, settings, "session_start")
    send(store, settings, "user_prompt", prompt="Run the migration")
    send(store, settings, "tool_use", tool_name="Bash", tool_use_id="t1",
         tool_input={"command": "alembic upgrade head"}, tool_response="relation users already there", is_error=True)
    send(store, settings, "stop", last_assistant_message="Tried the migration.")
    CapturePipeline(store, settings).process_pending()
    observations = store.list_items(ItemFilter(kinds=["observation"]), limit=10)
    told = " ".join(" ".join([o.title or "", o.narrative or "", *o.facts]) for o in observations)
    assert "alembic upgrade head" in told and "failed" in told.lower(), told


def test_an_episode_names_the_calls_it_covers(store: Store, settings: Settings) -> None:
    one_turn(store, settings)
    CapturePipeline(store, settings).process_pending()
    observations = store.list_items(ItemFilter(kinds=["observation"]), limit=50)
    assert len(observations) == 1  # failing run, fix and passing run: one episode
    assert observations[0].type == "bugfix" and observations[0].metadata["steps"] == ["t1", "t2", "t3"]
