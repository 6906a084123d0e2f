"""``memcairn bench faults --only disk-hooks``: real prompt hooks against a worker on a full 16 MB tmpfs (needs
the right to mount); every event the hooks took is stored once a little room comes back, none is lost or
stored twice, and no temporary file is left."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_prompt_hooks_on_a_full_disk_lose_nothing(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, "-m", "memcairn", "bench", "faults", "--only", "disk-hooks", "--json",
                           str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())
    if row["held"] == "skipped":
        pytest.skip(row["notes"])
    assert row["sent"] == row["acknowledged"] == row["stored"] == 50, row
    assert row["lost"] == 0 and row["duplicated"] == 0 and row["held"] == "yes", row
    assert "0 hooks said lost" in row["notes"] and "all stored" in row["notes"], row
    assert ".tmp files left: 0 while full, 0 at the end" in row["notes"] and "reserve back: yes" in row["notes"], row
    held = re.search(r"(\d+) held in the worker's memory only", row["notes"])
    assert held is not None and int(held.group(1)) > 0, row  # the worker's memory was needed
