"""The spool drainer queues a spooled event through the ingest use case itself (``worker/intake.py``), with no
HTTP in the way: a check the event fails is a ``ValidationError``, which the drainer sets aside as rejected."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memcairn.core.errors import ValidationError
from memcairn.store import Store
from memcairn.wire import spool
from memcairn.wire.config import Settings
from memcairn.wire.protocol import OBSERVATIONS_PATH


def test_the_drainer_path_imports_no_http() -> None:
    code = ("import sys; import memcairn.worker.spool_drain, memcairn.worker.intake; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn', 'httpx')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _event(**fields: object) -> bytes:
    return json.dumps({"session_id": "s-1", "cwd": "/work/calc", "platform_source": "claude-code",
                       "tool_name": "Bash", "tool_use_id": "toolu_1", "event": "tool_use", **fields}).encode()


def test_intake_refuses_a_malformed_event_with_a_validation_error(store: Store, settings: Settings) -> None:
    from memcairn.worker.intake import accept_spooled

    with pytest.raises(ValidationError, match="prompt_number must be a whole number"):
        accept_spooled(store, settings, OBSERVATIONS_PATH, _event(prompt_number="three"))
    with pytest.raises(ValidationError, match="not an ingest route"):
        accept_spooled(store, settings, "/api/search", _event())
    assert accept_spooled(store, settings, OBSERVATIONS_PATH, _event())["status"] == "accepted"


def test_the_drainer_sets_aside_what_intake_refuses_and_queues_the_rest(store: Store, settings: Settings) -> None:
    from memcairn.worker.spool_drain import SpoolDrainer, intake_accept

    home = str(settings.home)
    bad = spool.write(home, OBSERVATIONS_PATH, _event(session_id=None, tool_use_id="toolu_bad"))
    spool.write(home, OBSERVATIONS_PATH, _event(tool_use_id="toolu_good"))
    queued: list[None] = []
    drainer = SpoolDrainer(home, intake_accept(settings, lambda: store, lambda: queued.append(None)))
    report = drainer.drain()
    assert (report.queued, report.rejected, report.kept) == (1, 1, 0)
    assert len(queued) == 1
    assert [p.name for p in (Path(home) / "spool" / spool.REJECTED_DIR).iterdir()] == [Path(bad).name]
    assert list(spool.pending(home)) == []
