"""``memcairn bench faults --only poison`` run small: every healthy event is captured beside the poison, the
posted poison gets 400 and the planted rows are set aside or captured (the full run: ``memcairn bench faults``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from memcairn.bench import faults
from memcairn.bench.poison import poison

pytestmark = pytest.mark.slow


def test_the_poison_scenario_captures_every_healthy_event() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="memcairn-poison-test-"))
    try:
        row = poison(workdir, lambda _m: None, sessions=2, events=4).as_dict()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    assert row["sent"] == row["acknowledged"] == row["stored"] == 8, row
    assert row["lost"] == 0 and row["held"] == "yes", row
    notes = row["notes"]
    assert "healthy events captured in" in notes and "1e999 body: 400 (the number 1e999 at ratio)" in notes
    assert "NaN row: set aside" in notes and "2 of 2 tool events captured" in notes and "health ok" in notes


def test_the_command_runs_the_poison_scenario() -> None:
    assert "poison" in faults.SCENARIOS
    done = subprocess.run([sys.executable, "-m", "memcairn", "bench", "faults", "--only", "poison"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    row = done.stdout.strip().splitlines()[-1]
    assert "poison among 5 sessions x 20 events" in row and row.rstrip().split("|")[-3].strip() == "yes"
