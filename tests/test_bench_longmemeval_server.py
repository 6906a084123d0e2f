"""`memcairn bench longmemeval-server` end to end on a tiny LongMemEval file: its own embedded PostgreSQL, the real
model, the same metrics as the SQLite bench, and the comparison rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from longmemeval_records import synthetic_records

from memcairn.bench.longmemeval_scores import TABLE_METRICS
from memcairn.cli.app import run as cli_run

pytest.importorskip("pg0")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_the_server_store_answers_the_questions_and_is_compared(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "lme.json"
    data.write_text(json.dumps(synthetic_records()))
    sqlite = tmp_path / "sqlite.json"
    sqlite.write_text(json.dumps({"hybrid": {"overall": {m: 0.5 for m in TABLE_METRICS}}}))
    out = tmp_path / "pg.json"
    assert cli_run(["bench", "longmemeval-server", str(data), "--sqlite-json", str(sqlite), "--cache",
                    str(tmp_path / "cache.sqlite"), "--json", str(out), "--all-methods"]) == 0
    printed = capsys.readouterr().out
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|"))[:2] for line in printed.splitlines()
            if line.startswith("|")}
    assert {("hybrid", "sqlite"), ("hybrid", "postgresql"), ("hybrid", "difference"), ("keyword", "postgresql"),
            ("semantic", "postgresql")} <= rows
    assert ("keyword", "sqlite") not in rows  # the SQLite file held hybrid figures only
    result = json.loads(out.read_text())
    assert set(result) == {"keyword", "semantic", "hybrid"}
    for method in result.values():
        assert method["overall"]["n"] == 2  # the _abs question is not scored
        assert method["overall"]["recall_any@5"] == 1.0 and method["overall"]["recall_all@10"] == 1.0
        assert [q["gold_ranks"][:1] for q in method["details"]] == [[1], [1]]
