from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from memcairn.store import Store

pytestmark = pytest.mark.slow

_WRITER = """
import sys
from memcairn.core.models import NewItem
from memcairn.store import Store
path, worker = sys.argv[1], int(sys.argv[2])
store = Store(path)
for batch in range(10):
    store.add_items([NewItem(project=f"p{worker % 2}", kind="observation", title=f"w{worker} item {batch}-{i}",
                             narrative="concurrent write", session=f"s{worker}", platform_source="test")
                     for i in range(50)])
for i in range(500):
    store.add_item(NewItem(project=f"p{worker % 2}", kind="manual", title=f"w{worker} single {i}"))
store.close()
print("ok")
"""


def test_four_processes_writing_at_once_all_succeed(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    Store(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(w)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in range(4)]
    outputs = [p.communicate(timeout=240) for p in procs]
    for (_out, err), p in zip(outputs, procs, strict=True):
        assert p.returncode == 0, err
        assert "database is locked" not in err
    with Store(path) as store:
        assert store.stats()["items"] == 4000
        assert store.fts_counts() == (4000, 4000)
