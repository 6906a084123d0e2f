"""``memcairn bench longmemeval`` on LoCoMo files read directly, its BM25 anchor, and the defaults a Python caller
gets: the CLI's."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from memcairn.bench import longmemeval as lme
from memcairn.bench import longmemeval_bm25 as bm25
from memcairn.bench import longmemeval_data as lme_data
from memcairn.cli.app import run as cli_run


def _turn(dia: str, speaker: str, text: str) -> dict:
    return {"speaker": speaker, "dia_id": dia, "text": text}


def locomo_samples() -> list[dict]:
    conversation = {
        "speaker_a": "Ana", "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [_turn("D1:1", "Ana", "I went to a pottery class yesterday."),
                      _turn("D1:2", "Ben", "Nice! What did you make?"),
                      _turn("D1:3", "Ana", "A blue bowl for my sister.")],
        "session_2_date_time": "10:00 am on 20 June, 2023",
        "session_2": [_turn("D2:1", "Ben", "My dog Rex learned to fetch the frisbee."),
                      _turn("D2:2", "Ana", "Rex is so clever.")],
        "session_10_date_time": "9:15 pm on 1 July, 2023",
        "session_10": [_turn("D10:1", "Ana", "We hiked up the volcano in Tenerife.")],
    }
    qa = [
        {"question": "What did Ana make in the pottery class?", "answer": "a bowl", "evidence": ["D1:3"],
         "category": 1},
        {"question": "What can Rex fetch?", "answer": "a frisbee", "evidence": ["D2:1"], "category": 4},
        {"question": "Where did Ana hike?", "answer": "Tenerife", "evidence": ["D10:1", "D1:1"], "category": 2},
        {"question": "What did Ben paint?", "adversarial_answer": "a bowl", "evidence": ["D1:3"], "category": 5},
        {"question": "What is Ana's favourite food?", "answer": "?", "evidence": [], "category": 4},
    ]
    return [{"sample_id": "conv-x", "conversation": conversation, "qa": qa, "session_summary": {}}]


def test_a_locomo_file_is_read_directly(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(locomo_samples()))
    questions = lme_data.load_questions(path)
    # category 5 (adversarial) and a question without evidence are left out
    assert [q.id for q in questions] == ["conv-x_q0", "conv-x_q1", "conv-x_q2"]
    first = questions[0]
    assert first.type == "locomo-cat1" and first.answer_ids == ("conv-x_S1",)
    assert [s.id for s in first.sessions] == ["conv-x_S1", "conv-x_S2", "conv-x_S10"]  # by number, not by text
    assert first.sessions[0].turns[2] == ("user", "Ana: A blue bowl for my sister.")
    assert first.sessions[0].epoch_ms == lme_data.parse_date("2023/05/08 13:56")
    assert first.now_ms == lme_data.parse_date("2023/07/02 21:15")  # a day after the last session
    assert questions[2].answer_ids == ("conv-x_S1", "conv-x_S10")
    assert [q.id for q in lme_data.load_questions(path, limit=1)] == ["conv-x_q0"]


def test_a_locomo_sample_without_dates_is_a_clear_error(tmp_path: Path) -> None:
    from memcairn.core.errors import ValidationError

    samples = locomo_samples()
    del samples[0]["conversation"]["session_2_date_time"]
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(samples))
    with pytest.raises(ValidationError, match="sample 0, session_2_date_time"):
        lme_data.load_questions(path)


def test_the_bm25_anchor_ranks_sessions_by_their_best_turn(tmp_path: Path) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(locomo_samples()))
    questions = lme_data.load_questions(path)
    index = bm25.TurnIndex(questions[0].sessions)
    try:
        assert index.rank("What can Rex fetch?")[0] == "conv-x_S2"
        assert index.rank("volcano Tenerife") == ["conv-x_S10"]
        assert index.rank("xyzzy?") == [] and index.rank("?") == []
    finally:
        index.close()


def test_the_command_reports_the_anchor_beside_memcairn_on_locomo(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(locomo_samples()))
    out = tmp_path / "out.json"
    assert cli_run(["bench", "longmemeval", str(path), "--method", "keyword", "--json", str(out), "--quiet"]) == 0
    result = json.loads(out.read_text())
    assert list(result) == ["keyword", "bm25-turns"]
    assert result["bm25-turns"]["overall"]["n"] == 3 and result["bm25-turns"]["overall"]["recall_any@1"] == 1.0
    assert result["keyword"]["timing"]["stores"] == 1  # three questions of one conversation: one store
    assert "| bm25-turns" in capsys.readouterr().out
    assert cli_run(["bench", "longmemeval", str(path), "--method", "keyword", "--json", str(out), "--quiet",
                    "--no-anchor"]) == 0
    assert list(json.loads(out.read_text())) == ["keyword"]


def test_a_python_caller_gets_the_options_the_command_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lme.Options()`` once held a 90-day recency window that the command never used."""
    seen: list[lme.Options] = []

    def capture(questions, opts, progress=None):  # noqa: ANN001, ANN202
        seen.append(opts)
        return {}

    monkeypatch.setenv("MEMCAIRN_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(lme, "run", capture)
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(locomo_samples()))
    assert cli_run(["bench", "longmemeval", str(path), "--quiet"]) == 0
    from_cli = asdict(seen[0])
    from_python = asdict(lme.Options())
    del from_cli["cache_path"], from_python["cache_path"]  # the command caches vectors in its home
    assert from_cli == from_python
