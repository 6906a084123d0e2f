"""Tool events that arrive after the next turn's prompt (Claude Code runs the PostToolUse hook ``async``): each
hook stamps its body with when it started (``hook_started_at``), and the pipeline files a tool event under the
turn whose prompt hook started at or before it, falling back to arrival order without stamps."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hook_helpers import Workers
from processes import free_port

from memcairn.bench.hooks import hook_command
from memcairn.capture.admission import admit
from memcairn.capture.pipeline import CapturePipeline, CaptureReport
from memcairn.capture.records import Compressed, Observation, Summary, ToolCall, Turn
from memcairn.core.models import ItemFilter
from memcairn.hooks.hook import Hook
from memcairn.store import Store
from memcairn.store.ingest_state import _row_to_event
from memcairn.wire.config import Settings
from memcairn.wire.protocol import HOOK_STARTED_FIELD

SESSION = "sess-late"
QUEUE = {"session_start": "session_init", "user_prompt": "session_init", "tool_use": "observation",
         "stop": "summarize", "session_end": "summarize"}
FIXTURES = Path(__file__).parent / "fixtures" / "hooks"


def now_ms() -> int:
    return int(time.time() * 1000)


def send(store: Store, settings: Settings, event: str, started: int | None = None, **fields: object) -> int:
    """What the ingest route does with a hook's body (admission, then the durable queue)."""
    body: dict[str, object] = {"event": event, "session_id": SESSION, "cwd": "/work/shop", "project": "shop",
                               "projects": ["shop"], "platform_source": "claude-code", **fields}
    if started is not None:
        body[HOOK_STARTED_FIELD] = started
    admitted = admit(QUEUE[event], body, settings)
    assert admitted.body is not None
    tool_use_id = fields.get("tool_use_id")
    event_id, created = store.enqueue_ingest_event(SESSION, "claude-code", QUEUE[event], admitted.body,
                                                   tool_use_id if isinstance(tool_use_id, str) else None)
    assert created
    return event_id


def tool(tool_use_id: str, command: str) -> dict[str, object]:
    return {"tool_name": "Bash", "tool_use_id": tool_use_id, "tool_input": {"command": command},
            "tool_response": {"stdout": f"ran {command}", "stderr": "", "interrupted": False}}


class Recorder:
    """A compressor that records what it was given: one observation per call, titled with its tool id."""

    name = "recorder"

    def __init__(self) -> None:
        self.observed: list[tuple[Turn, list[str | None]]] = []
        self.summarized: list[tuple[Turn, list[str]]] = []

    def observe(self, turn: Turn, calls: Sequence[ToolCall]) -> Compressed:
        self.observed.append((turn, [c.tool_use_id for c in calls]))
        return Compressed(observations=[Observation(type="change", title=f"call {c.tool_use_id}",
                                                    narrative=f"ran {c.input}") for c in calls])

    def summarize(self, turn: Turn, observations: Sequence[Observation]) -> Compressed:
        self.summarized.append((turn, [o.title for o in observations]))
        return Compressed(summary=Summary(request=turn.prompt or "", completed="done"))

    def turn_of(self, tool_use_id: str) -> Turn:
        return next(turn for turn, ids in self.observed if tool_use_id in ids)


def numbers(store: Store) -> dict[str, int | None]:
    """Each observation's tool id (from its title) and prompt number."""
    items = store.list_items(ItemFilter(session=SESSION, kinds=["observation"]), order="oldest", limit=100)
    return {i.title.removeprefix("call "): i.prompt_number for i in items if i.title}


def test_a_tool_event_of_turn_1_arriving_after_turn_2_s_prompt_is_filed_under_turn_1(
        store: Store, settings: Settings) -> None:
    t = now_ms() - 60_000
    send(store, settings, "session_start", t)
    send(store, settings, "user_prompt", t + 1_000, prompt="Fix the cart total")
    send(store, settings, "tool_use", t + 2_000, **tool("a", "pytest"))
    send(store, settings, "stop", t + 4_000, last_assistant_message="Fixed.")
    send(store, settings, "user_prompt", t + 5_000, prompt="Now check refunds")
    send(store, settings, "tool_use", t + 3_000, **tool("b", "git diff"))  # turn 1's, overtaken by prompt 2
    send(store, settings, "tool_use", t + 6_000, **tool("c", "pytest refunds"))
    send(store, settings, "stop", t + 7_000, last_assistant_message="Refunds checked.")
    recorder = Recorder()
    CapturePipeline(store, settings, compressor=recorder).drain()
    assert numbers(store) == {"a": 1, "b": 1, "c": 2}
    late = recorder.turn_of("b")
    assert late.prompt == "Fix the cart total" and late.prompt_number == 1
    assert [c.tool_use_id for c in late.tools] == ["a"]  # its turn's earlier call, not turn 2's
    assert all(ids in (["a"], ["b"], ["c"]) for _, ids in recorder.observed)  # a batch holds one turn
    second = recorder.turn_of("c")
    assert second.prompt == "Now check refunds" and [c.tool_use_id for c in second.tools] == []
    # turn 2's summary is made of turn 2's observations only; turn 1 was summarised before b came
    last_turn, titles = recorder.summarized[-1]
    assert last_turn.prompt_number == 2 and titles == ["call c"]
    assert [c.tool_use_id for c in last_turn.tools] == ["c"]


def test_a_late_tool_event_processed_after_later_turns_is_numbered_with_its_turn(
        store: Store, settings: Settings) -> None:
    t = now_ms() - 60_000
    send(store, settings, "user_prompt", t + 1_000, prompt="Fix the cart total")
    send(store, settings, "tool_use", t + 2_000, **tool("a", "pytest"))
    send(store, settings, "stop", t + 4_000, last_assistant_message="Fixed.")
    send(store, settings, "user_prompt", t + 5_000, prompt="Now check refunds")
    send(store, settings, "user_prompt", t + 8_000, prompt="And the invoices")
    recorder = Recorder()
    pipeline = CapturePipeline(store, settings, compressor=recorder)
    pipeline.drain()  # all three prompts counted, turn 1 summarised
    send(store, settings, "tool_use", t + 3_000, **tool("b", "git diff"))
    pipeline.drain()
    assert numbers(store) == {"a": 1, "b": 1}
    late = recorder.turn_of("b")
    assert late.prompt == "Fix the cart total" and late.prompt_number == 1
    assert [c.tool_use_id for c in late.tools] == ["a"]
    summaries = store.list_items(ItemFilter(session=SESSION, kinds=["summary"]), limit=10)
    assert [s.prompt_number for s in summaries] == [1]  # filed, not summarised again


def test_late_and_current_tool_events_pending_together_are_compressed_in_separate_batches(
        store: Store, settings: Settings) -> None:
    t = now_ms() - 60_000
    send(store, settings, "user_prompt", t + 1_000, prompt="Fix the cart total")
    send(store, settings, "user_prompt", t + 5_000, prompt="Now check refunds")
    send(store, settings, "tool_use", t + 3_000, **tool("b", "git diff"))
    send(store, settings, "tool_use", t + 6_000, **tool("c", "pytest refunds"))
    send(store, settings, "tool_use", t + 6_500, **tool("d", "pytest invoices"))
    recorder = Recorder()
    CapturePipeline(store, settings, compressor=recorder).process_pending(flush=True)
    assert [(turn.prompt_number, ids) for turn, ids in recorder.observed] == [(1, ["b"]), (2, ["c", "d"])]
    assert numbers(store) == {"b": 1, "c": 2, "d": 2}


def test_a_prompt_stamp_in_the_future_is_bounded_by_its_receipt(store: Store, settings: Settings) -> None:
    t = now_ms() - 60_000
    send(store, settings, "user_prompt", t, prompt="Fix the cart total")
    send(store, settings, "user_prompt", now_ms() + 86_400_000, prompt="Now check refunds")  # a clock gone wrong
    send(store, settings, "tool_use", now_ms(), **tool("c", "pytest refunds"))
    CapturePipeline(store, settings, compressor=Recorder()).drain()
    assert numbers(store) == {"c": 2}


def test_events_without_stamps_keep_arrival_order(store: Store, settings: Settings) -> None:
    t = now_ms() - 60_000
    send(store, settings, "user_prompt", prompt="Fix the cart total")  # an older hook: no stamps at all
    send(store, settings, "user_prompt", prompt="Now check refunds")
    send(store, settings, "tool_use", **tool("b", "git diff"))
    send(store, settings, "user_prompt", prompt="And the invoices")  # a prompt without a stamp stands where it is
    send(store, settings, "tool_use", t, **tool("c", "pytest"))
    CapturePipeline(store, settings, compressor=Recorder()).drain()
    assert numbers(store) == {"b": 2, "c": 3}


def test_no_qualifying_prompt_falls_back_to_arrival_order(store: Store, settings: Settings) -> None:
    t = now_ms() - 60_000
    send(store, settings, "user_prompt", t + 5_000, prompt="Fix the cart total")
    send(store, settings, "tool_use", t, **tool("a", "pytest"))  # started before every prompt: a clock stepped back
    recorder = Recorder()
    CapturePipeline(store, settings, compressor=recorder).drain()
    assert numbers(store) == {"a": 1}
    assert recorder.turn_of("a").prompt == "Fix the cart total"  # never left outside every recorded turn


def test_a_replayed_late_event_is_processed_once(store: Store, settings: Settings) -> None:
    """The exactly-once rule holds for a late event: a second processor finds it done and writes nothing."""
    t = now_ms() - 60_000
    send(store, settings, "user_prompt", t + 1_000, prompt="Fix the cart total")
    send(store, settings, "user_prompt", t + 5_000, prompt="Now check refunds")
    send(store, settings, "tool_use", t + 3_000, **tool("b", "git diff"))
    first, second = (CapturePipeline(store, settings, compressor=Recorder()) for _ in range(2))
    pending = store.pending_ingest_events()
    first.process_pending(flush=True)
    second._session(pending, CaptureReport(), True)  # a second processor that read the same pending events
    assert numbers(store) == {"b": 1}
    assert store.ingest_counts()["pending"] == 0


# -- the hook's stamp ---------------------------------------------------------------------------------------
def test_every_hook_body_carries_when_the_hook_started(isolated_home: Path) -> None:
    before = now_ms()
    hook = Hook("post-tool-use", "claude-code", {"session_id": "s", "cwd": str(isolated_home)})
    after = now_ms()
    for event in ("tool_use", "user_prompt", "stop"):
        stamp = hook.base_body(event)[HOOK_STARTED_FIELD]
        assert isinstance(stamp, int) and before <= stamp <= after
        assert stamp == hook.started_at  # taken once, at the hook's start


@pytest.fixture
def worker_env(isolated_home: Path) -> Iterator[dict[str, str]]:
    env = dict(os.environ)
    env.update(MEMCAIRN_PORT=str(free_port()), MEMCAIRN_EMBEDDING_MODEL="hash", MEMCAIRN_WORKER_AUTOSTART="0")
    workers = Workers()
    workers.start(env)
    try:
        yield env
    finally:
        workers.stop_all()


def run_hook(env: dict[str, str], event: str, data: dict[str, Any]) -> None:
    done = subprocess.run([*hook_command(), "hook", event], input=json.dumps(data).encode(), capture_output=True,
                          env=env, timeout=30)
    assert done.returncode == 0 and json.loads(done.stdout) == {}, done.stderr


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="the worker's lifecycle reads /proc")
def test_the_real_hooks_stamp_the_events_the_worker_queues(worker_env: dict[str, str], isolated_home: Path,
                                                           tmp_path: Path) -> None:
    project = tmp_path / "calc"
    (project / ".git").mkdir(parents=True)
    before = now_ms()
    for event, name in (("user-prompt-submit", "user_prompt_submit"), ("post-tool-use", "post_tool_use_bash")):
        data = json.loads((FIXTURES / f"{name}.json").read_text())
        run_hook(worker_env, event, {**data, "cwd": str(project)})
    store = Store(isolated_home / "memcairn.db")
    try:
        queued = [_row_to_event(r) for r in store._conn.execute("SELECT * FROM ingest_events ORDER BY id")]
    finally:
        store.close()
    assert [e.kind for e in queued] == ["user_prompt", "tool_use"]
    stamps = [e.payload[HOOK_STARTED_FIELD] for e in queued]
    assert all(isinstance(s, int) for s in stamps)
    assert before <= stamps[0] <= queued[0].created_at_epoch <= stamps[1] <= queued[1].created_at_epoch
