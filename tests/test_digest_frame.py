"""The SessionStart digest's frame (legend, cost line, pointers to the tools) grows with what it frames: on a small
store it cost more than the memory it showed."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from pathlib import Path

from offline_turns import load_transcript

from memcairn.capture.offline import OfflineExtractor
from memcairn.context.build import render_context
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.wire.config import Settings

NOW = int(datetime(2026, 12, 3, 14, 0, tzinfo=UTC).timestamp() * 1000)


def _frame_and_content(text: str) -> tuple[int, int]:
    """Characters of the text inside the fence that frame it, and that carry memory: sessions (their titles and
    lines) and rows. The fence's own lines (a fixed safety preamble) are left out."""
    inside = text.splitlines()[2:-1]
    carried = [line for line in inside
               if line.startswith(("Next steps:", "Decisions:", "Tests:", "Learned:", "Done:"))
               or re.match(r"#\d+ ", line) or re.match(r"### .+ · ", line)]
    content = sum(len(line) + 1 for line in carried)
    return sum(len(line) + 1 for line in inside) - content, content


def test_on_a_small_store_the_frame_costs_less_than_the_memory(tmp_path: Path) -> None:
    # real: one short session (hello-world-script), its observations and summary as the extractor makes them
    turn, calls = load_transcript("hello-world-script")
    extractor = OfflineExtractor()
    observations = extractor.observe(turn, calls).observations
    summary = extractor.summarize(turn, observations).summary
    assert summary is not None
    store = Store(tmp_path / "memcairn.db")
    try:
        at = NOW - 3_600_000
        for n, obs in enumerate(observations):
            store.add_item(NewItem(project="hello", kind="observation", session="s1", type=obs.type,
                                   title=obs.title, narrative=obs.narrative, facts=list(obs.facts),
                                   created_at_epoch=at + n, platform_source="claude-code"))
        fields = {f.name: getattr(summary, f.name) for f in dataclasses.fields(summary)
                  if f.name in ("request", "investigated", "learned", "completed", "next_steps", "notes")}
        store.add_item(NewItem(project="hello", kind="summary", session="s1", created_at_epoch=at + 100,
                               platform_source="claude-code", **fields))
        text = render_context(store, Settings(home=tmp_path), projects=["hello"], now_ms=NOW, tz=UTC)
    finally:
        store.close()
    frame, content = _frame_and_content(text)
    assert content > 0 and frame < content, (frame, content, text)
    assert "Legend:" not in text and "important_workflow" not in text
    footer = text.splitlines()[-2]  # what it costs and the way to the rest, in one line
    assert footer.startswith("Cost: ~") and "search(query)" in footer


def test_a_digest_with_much_to_show_keeps_its_legend_and_pointers(mem_store: Store, tmp_path: Path) -> None:
    for n in range(40):
        mem_store.add_item(NewItem(project="big", kind="observation", type="bugfix", session="s1",
                                   title=f"Fixed the retry of upload {n} after the token expired mid-transfer",
                                   created_at_epoch=NOW - 3_600_000 + n, platform_source="claude-code"))
    text = render_context(mem_store, Settings(home=tmp_path), projects=["big"], now_ms=NOW, tz=UTC)
    lines = text.splitlines()
    assert lines[3].startswith("Legend: ") and lines[-3].startswith("Cost: ~") and "important_workflow" in lines[-2]
