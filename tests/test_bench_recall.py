"""``memcairn bench recall``: the fact-matching rule, the raw-transcript anchor, and a whole run on a small real
transcript (a real worker process, the import as its own process) with a QA file written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from processes import mentioning, processes_of

from memcairn.bench.recall_facts import Question, facts_held, load_questions, normalise
from memcairn.bench.recall_raw import RawIndex, steps_of
from memcairn.cli.app import run as cli

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures" / "transcripts"
HELLO = FIXTURES / "claude-reliability__hello-world-script.jsonl"


def _q(*facts: list[str]) -> Question:
    return Question("q", "?", tuple(tuple(f) for f in facts))


def test_facts_match_across_case_spacing_quotes_and_backticks_but_punctuation_counts() -> None:
    text = normalise("Uses `Sandbox.mode(Repo, { :shared, self() })` \u2014 it doesn\u2019t   hold\n"
                     "the ALTER TABLE ... MODIFY")
    assert facts_held(_q(["{:shared, self()}"], ["doesn't hold the"], ["alter table ... modify"]), text) == [
        True, True, True]
    # the colon of an atom is part of the keyword: a bare word does not stand in for it
    assert facts_held(_q([":close"], ["close", ":shared"]), normalise("closed the file; :shared")) == [False, True]
    assert facts_held(_q(["nowhere", "absent"]), text) == [False]


def test_questions_load_from_several_files_and_refuse_bad_ones(tmp_path: Path) -> None:
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    one.write_text(json.dumps({"questions": [
        {"id": "a", "question": "where?", "facts": [["X", "Y"], "Z"], "session": "s1.jsonl", "kind": "where-is"}]}))
    two.write_text(json.dumps({"questions": [{"id": "b", "question": "never said?", "facts": []}]}))
    first, second = load_questions([one, two])
    assert first.facts == (("X", "Y"), ("Z",)) and first.session == "s1" and not first.unanswerable
    assert second.unanswerable and second.source == str(two)
    with pytest.raises(ValueError, match="used twice"):
        load_questions([one, one])
    two.write_text(json.dumps({"questions": [{"id": "c", "question": "?", "facts": [[]]}]}))
    with pytest.raises(ValueError, match="non-empty list of keywords"):
        load_questions([two])


def test_raw_anchor_has_one_chunk_per_assistant_step_with_input_and_result() -> None:
    chunks = steps_of(HELLO)
    assert any("Write:" in c and "hello.sh" in c and "File created successfully" in c for c in chunks)
    assert any("Bash:" in c and "chmod +x" in c and "Hello world" in c for c in chunks)
    index = RawIndex([HELLO])
    try:
        assert "chmod" in index.top("chmod the script", 1)[0]
        assert index.top("kubernetes", 5) == []
    finally:
        index.close()


def test_bench_recall_imports_through_a_real_worker_and_scores_both_systems(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qa, out, home = tmp_path / "qa.json", tmp_path / "out.json", tmp_path / "home"
    qa.write_text(json.dumps({"questions": [
        {"id": "made", "question": "which shell script printing hello world did we write?",
         "facts": [["hello.sh"], ["Hello world"]], "session": HELLO.name},
        {"id": "absent", "question": "which kubernetes cluster did we deploy to?", "facts": [["kubernetes"]]},
        {"id": "none", "question": "which kubernetes cluster did we deploy to?", "facts": []},
    ]}))
    code = cli(["bench", "recall", str(qa), str(HELLO), "--model", "hash", "--home", str(home), "--json", str(out),
                "--setting", "search_evidence_snippets=2"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads((home / "settings.json").read_text()) == {"search_evidence_snippets": 2}  # the worker's own
    assert "| qa | memcairn |" in captured.out and "| qa | raw BM25 (" in captured.out

    result = json.loads(out.read_text())
    assert result["import"]["report"]["files"] == 1 and result["import"]["failed_events"] == 0
    assert result["items"].get("observation", 0) >= 1 and list(result["context_tokens"])
    made, absent, none = result["questions"]
    assert made["stored"] == 1.0 and made["raw"]["stored"] == 1.0 and made["raw"]["top5"] is True
    assert made["digest"] > 0 and made["hits"] >= 1 and made["tokens"] > 0
    assert absent["stored"] == 0.0 and absent["top5"] is False and absent["raw"]["stored"] == 0.0
    assert "stored" not in none and isinstance(none["no_result"], bool) and none["raw"]["no_result"] is True
    assert result["totals"]["questions"] == 2 and result["totals"]["unanswerable"] == 1
    assert result["raw"]["totals"]["stored"] == 0.667  # 2 of the 3 facts
    # the raw ranking read only as far as memcairn's median cost: the same questions, text cut at that budget
    budget = result["totals"]["tokens_median"]
    cut, twice = result["raw_at_budget"]
    assert cut["tokens"] == budget and cut["totals"]["tokens_median"] <= budget
    assert twice["factor"] == 2 and twice["totals"]["tokens_median"] <= 2 * budget
    assert cut["totals"]["top5"] <= result["raw"]["totals"]["top5"] and cut["totals"]["top5"] <= twice["totals"]["top5"]
    assert f"| qa | raw BM25 at 1x memcairn's tokens ({budget:,} tokens) |" in captured.out
    assert result["totals_by_qa"] == {} and result["totals_by_set"] == {}  # one set: its totals are the totals
    assert processes_of(home, mentioning(b"memcairn")) == []

    assert cli(["bench", "recall", str(qa), str(HELLO), "--model", "hash", "--home", str(home)]) == 1
    assert "already holds a store" in capsys.readouterr().err
    assert cli(["bench", "recall", str(qa), str(HELLO), "--setting", "no_such=1"]) == 2
    assert "give NAME=VALUE with NAME one of the settings" in capsys.readouterr().err
