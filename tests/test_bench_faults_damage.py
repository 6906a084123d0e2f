"""``memcairn bench faults``'s damage scenarios run small: a page damaged and a keyword table dropped under a
running worker, a keyword index damaged in every block; each row holds (no write lost, no wrong answer that
says nothing of being wrong)."""

from __future__ import annotations

import pytest

from memcairn.bench import faults

pytestmark = pytest.mark.slow


def test_the_damage_scenarios_hold() -> None:
    rows = {r.scenario: r for r in faults.run(items=40, searches=8, model="hash",
                                              only=("corrupt-live", "fts", "drop"), log=lambda _m: None)}
    live = rows["corrupted page, worker running"]
    assert live.as_dict()["held"] == "yes", live.as_dict()
    assert live.refused > 0 and "0 saves sent after that acknowledged" in live.notes[0]
    assert live.acked == live.stored  # acknowledged before the damage was met: stored whole
    fts = rows["damaged keyword index"]
    assert fts.as_dict()["held"] == "yes", fts.as_dict()
    assert "wrong" not in fts.notes[0] and "repaired by the worker" in fts.notes[0]
    assert "after the repair keyword 4: 4 right, hybrid 4: 4 right" in fts.notes[0]
    drop = rows["keyword table dropped"]
    assert drop.as_dict()["held"] == "yes", drop.as_dict()
    assert drop.sent == len(drop.acked) == len(drop.stored) == 40
    assert "events failed: 0; keyword search found 20 of 20" in drop.notes[0]
