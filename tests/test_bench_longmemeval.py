"""The LongMemEval retrieval benchmark: metric math by hand, the data format, the items a session becomes,
the semantic-only leg of the search service, and the command end to end on tiny synthetic data."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from longmemeval_records import FILLER, synthetic_records
from longmemeval_records import record as _record
from longmemeval_records import turn as _turn

from memcairn.bench import longmemeval as lme
from memcairn.bench import longmemeval_data as lme_data
from memcairn.bench import longmemeval_items as lme_items
from memcairn.bench import longmemeval_scores as lme_scores
from memcairn.cli.app import run as cli_run
from memcairn.core.errors import ValidationError
from memcairn.core.models import NewItem
from memcairn.mirror.sync import MirrorSync
from memcairn.search import SearchService
from memcairn.store import Store
from memcairn.vectors.fake import HashEmbedder
from memcairn.vectors.memory import InMemoryIndex


# -- metrics, computed by hand ---------------------------------------------------------------------------
def test_recall_any_and_all_at_k() -> None:
    ranked = ["a", "b", "c", "d", "e"]
    gold = ["b", "d"]
    assert [lme_scores.recall_any(ranked, gold, k) for k in (1, 2, 3, 5)] == [0.0, 1.0, 1.0, 1.0]
    assert [lme_scores.recall_all(ranked, gold, k) for k in (1, 2, 3, 4, 5)] == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert lme_scores.recall_any(ranked, ["z"], 5) == 0.0 and lme_scores.recall_all(ranked, ["z"], 5) == 0.0
    assert lme_scores.recall_all(ranked, [], 5) == 0.0  # no gold: nothing to find, never a success


def test_ndcg_with_binary_relevance() -> None:
    ranked = ["a", "b", "c", "d", "e"]
    # gold at ranks 2 and 4: DCG = 1/log2(3) + 1/log2(5); ideal puts both first: 1 + 1/log2(3)
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert lme_scores.ndcg(ranked, ["b", "d"], 5) == pytest.approx(expected)
    assert lme_scores.ndcg(ranked, ["b", "d"], 3) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert lme_scores.ndcg(ranked, ["a"], 10) == 1.0
    assert lme_scores.ndcg(ranked, ["c"], 10) == pytest.approx(1 / math.log2(4))  # 0.5
    assert lme_scores.ndcg(ranked, ["c"], 2) == 0.0
    # more gold than k: the ideal holds only k of them
    assert lme_scores.ndcg(["x", "y"], ["x", "y", "z"], 2) == 1.0


def test_score_ranking_and_aggregate_by_type() -> None:
    hit = lme_scores.score_ranking(["g1", "x"], ["g1"])
    miss = lme_scores.score_ranking(["x", "y", "z", "g1"], ["g1"])
    assert set(hit) == set(lme_scores.METRICS)
    assert hit["recall_any@1"] == 1.0 and hit["ndcg_any@10"] == 1.0
    assert miss["recall_any@3"] == 0.0 and miss["recall_any@5"] == 1.0
    assert miss["ndcg_any@5"] == pytest.approx(1 / math.log2(5))
    result = lme_scores.aggregate([("t1", hit), ("t1", miss), ("t2", hit)])
    assert result["overall"]["n"] == 3
    assert result["overall"]["recall_any@1"] == pytest.approx(round(2 / 3, 4))
    assert result["by_type"]["t1"]["recall_any@1"] == 0.5 and result["by_type"]["t1"]["n"] == 2
    assert result["by_type"]["t2"]["recall_any@3"] == 1.0
    assert lme_scores.aggregate([]) == {"overall": {"n": 0}, "by_type": {}}


def test_hits_map_to_distinct_sessions_in_rank_order() -> None:
    assert lme_scores.distinct_sessions(["s2", "s1", "s2", None, "s3", "s1"]) == ["s2", "s1", "s3"]
    assert lme_scores.distinct_sessions([f"s{i}" for i in range(30)], top=10) == [f"s{i}" for i in range(10)]


# -- the data format ---------------------------------------------------------------------------------------
def test_dates_parse_as_utc() -> None:
    assert lme_data.parse_date("2023/05/30 (Tue) 10:18") == int(
        datetime(2023, 5, 30, 10, 18, tzinfo=UTC).timestamp() * 1000)
    assert lme_data.parse_date("2023/05/30") == int(datetime(2023, 5, 30, tzinfo=UTC).timestamp() * 1000)
    assert lme_data.parse_date("2023-05-30T10:18") == lme_data.parse_date("2023/05/30 (Tue) 10:18")
    with pytest.raises(ValidationError):
        lme_data.parse_date("2023/02/30 (Thu) 10:00")
    with pytest.raises(ValidationError):
        lme_data.parse_date("last tuesday")


def test_parse_questions_reads_the_format_and_marks_abstentions() -> None:
    questions = lme_data.parse_questions(synthetic_records())
    assert [q.id for q in questions] == ["q_bakery", "q_guitar", "q_bakery_abs"]
    assert [q.scored for q in questions] == [True, True, False]
    first = questions[0]
    assert first.type == "single-session-user" and first.answer_ids == ("a_bakery",)
    assert [s.id for s in first.sessions] == ["f_garden", "f_python", "f_travel", "a_bakery"]
    assert first.sessions[0].epoch_ms == lme_data.parse_date("2023/05/20 (Sat) 00:00")
    assert first.sessions[-1].turns[0] == ("user", "My cousin Ines opened a sourdough bakery in Leeds.")
    assert first.now_ms == lme_data.parse_date("2023/05/30 (Tue) 10:18")


def test_parse_questions_refuses_malformed_records() -> None:
    good = synthetic_records()[0]
    with pytest.raises(ValidationError, match="JSON list"):
        lme_data.parse_questions({"question_id": "x"})
    with pytest.raises(ValidationError, match="lacks answer_session_ids"):
        lme_data.parse_questions([{k: v for k, v in good.items() if k != "answer_session_ids"}])
    with pytest.raises(ValidationError, match="same length"):
        lme_data.parse_questions([{**good, "haystack_dates": good["haystack_dates"][:-1]}])
    with pytest.raises(ValidationError, match="turn 0"):
        lme_data.parse_questions([{**good, "haystack_sessions": [[{"role": "user"}]] * len(good["haystack_dates"])}])
    sid = good["haystack_session_ids"][1]
    dates = [*good["haystack_dates"]]
    dates[1] = "2023/13/45 (Mon) 10:00"
    with pytest.raises(ValidationError, match=f"question {good['question_id']}, session {sid}: haystack date"):
        lme_data.parse_questions([{**good, "haystack_dates": dates}])
    with pytest.raises(ValidationError, match=f"question {good['question_id']}: question_date"):
        lme_data.parse_questions([{**good, "question_date": "yesterday-ish"}])


# -- items -------------------------------------------------------------------------------------------------
SESSION = lme_data.Session("s1", 1_000_000, (
    ("user", "first question"), ("assistant", "first answer"), ("assistant", "more of it"),
    ("user", "second question"), ("assistant", "  "), ("assistant", "second answer"),
))


def test_round_items_pair_each_user_message_with_its_replies() -> None:
    items = lme_items.session_items(SESSION, "round")
    assert [(i.kind, i.narrative, i.text) for i in items] == [
        ("observation", "first question", "first answer\n\nmore of it"),
        ("observation", "second question", "second answer"),
    ]
    assert all(i.session == "s1" and i.platform_source == "longmemeval" and i.project == lme_items.PROJECT
               for i in items)
    assert [i.created_at_epoch for i in items] == [1_000_000, 1_000_003]
    assert items[1].metadata == {"session_id": "s1", "turn": 3}
    # a session that opens with the assistant gets a round without a user message
    opening = lme_items.session_items(lme_data.Session("s2", 5, (("assistant", "hello"), ("user", "hi"))), "round")
    assert [(i.narrative, i.text) for i in opening] == [(None, "hello"), ("hi", None)]


def test_session_turn_and_user_items() -> None:
    (whole,) = lme_items.session_items(SESSION, "session")
    assert list(whole.facts) == ["first question", "first answer", "more of it", "second question", "second answer"]
    assert whole.text is None and whole.narrative is None and whole.session == "s1"
    turns = lme_items.session_items(SESSION, "turn")
    assert [i.kind for i in turns] == ["prompt", "observation", "observation", "prompt", "observation"]
    assert [i.prompt_number for i in turns if i.kind == "prompt"] == [0, 3]
    users = lme_items.session_items(SESSION, "user")
    assert [(i.kind, i.text) for i in users] == [("prompt", "first question"), ("prompt", "second question")]
    with pytest.raises(ValidationError, match="granularity"):
        lme_items.session_items(SESSION, "paragraph")
    both = lme_items.session_items(SESSION, " session, user ")
    assert [i.kind for i in both] == ["observation", "prompt", "prompt"]
    assert lme_items.check_granularity("TURN,turn, round") == "turn,round"


# -- the semantic leg alone, through the service ---------------------------------------------------------------
def test_the_service_runs_one_leg_when_asked(mem_store: Store) -> None:
    zebra = mem_store.add_item(NewItem(project="p", kind="manual", text="zebra crossing repainted")).id
    tiger = mem_store.add_item(NewItem(project="p", kind="manual", text="tiger stripes and zebra stripes")).id
    mirror = MirrorSync(mem_store, InMemoryIndex(384), HashEmbedder(), index_key="memory")
    mirror.backfill()
    semantic = SearchService(mem_store, mirror, legs=("semantic",)).search(query="zebra crossing")
    assert semantic.strategy == "semantic" and semantic.fallback_reason is None
    assert semantic.hits[0].item.id == zebra and all(set(h.legs) == {"semantic"} for h in semantic.hits)
    keyword = SearchService(mem_store, mirror, legs=("keyword",)).search(query="zebra crossing")
    assert keyword.strategy == "keyword" and keyword.fallback_reason is None
    # tiger holds half the query: shown after zebra, as a weak match (under the floor of a match)
    assert [h.item.id for h in keyword.hits] == [zebra, tiger] and keyword.hits[1].relevance < 1.0
    keyword = SearchService(mem_store, mirror, legs=("keyword",)).search(query="zebra crossing", min_score=0)
    assert {h.item.id for h in keyword.hits} == {zebra, tiger}
    assert all(set(h.legs) == {"keyword"} for h in keyword.hits)
    hybrid = SearchService(mem_store, mirror).search(query="zebra crossing")
    assert hybrid.strategy == "hybrid" and set(hybrid.hits[0].legs) == {"keyword", "semantic"}
    # without a usable mirror the semantic-only service still answers, from the keyword leg
    fallback = SearchService(mem_store, None, legs=("semantic",)).search(query="zebra")
    assert fallback.strategy == "keyword" and fallback.fallback_reason == "vector_unavailable"
    assert {h.item.id for h in fallback.hits} == {zebra, tiger}
    with pytest.raises(ValidationError, match="legs"):
        SearchService(mem_store, mirror, legs=("fuzzy",))
    with pytest.raises(ValidationError, match="legs"):
        SearchService(mem_store, mirror, legs=())


# -- end to end ----------------------------------------------------------------------------------------------
@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(synthetic_records()))
    return path


def test_the_command_runs_keyword_end_to_end(data_file: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    assert cli_run(["bench", "longmemeval", str(data_file), "--method", "keyword", "--json", str(out),
                    "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "| keyword" in printed and "recall_any@5" in printed and "single-session-user" in printed
    assert "query median ms" in printed and "peak memory" in printed
    result = json.loads(out.read_text())
    assert list(result) == ["keyword", "bm25-turns"]  # the independent anchor comes with every run
    assert result["bm25-turns"]["overall"]["recall_any@5"] == 1.0
    overall = result["keyword"]["overall"]
    assert overall["n"] == 2  # the _abs question is not scored
    for metric in ("recall_any@1", "recall_any@3", "recall_any@5", "recall_any@10", "recall_all@5",
                   "recall_all@10", "ndcg_any@5", "ndcg_any@10"):
        assert overall[metric] == 1.0, metric
    assert set(result["keyword"]["by_type"]) == {"single-session-user", "multi-session"}
    timing = result["keyword"]["timing"]
    # q_bakery and q_bakery_abs search the same haystack: one store answers both
    assert timing["queries"] == 3 and timing["stores"] == 2 and timing["texts_embedded"] == 0
    assert timing["peak_rss_mb"] > 0 and timing["query_median_ms"] >= 0


def test_all_methods_pooled_and_cached_with_the_hash_model(data_file: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache.sqlite"
    out = tmp_path / "all.json"
    args = ["bench", "longmemeval", str(data_file), "--all-methods", "--model", "hash", "--cache", str(cache),
            "--quiet"]
    assert cli_run([*args, "--json", str(out)]) == 0
    first = json.loads(out.read_text())
    assert list(first) == ["keyword", "semantic", "hybrid", "bm25-turns"]
    assert first["hybrid"]["overall"]["recall_any@5"] == 1.0
    assert first["hybrid"]["timing"]["texts_embedded"] > 0
    printed = capsys.readouterr().out
    assert "| semantic" in printed and "| hybrid" in printed
    # the same sessions pooled in one store: every document vector comes from the cache
    assert cli_run([*args, "--pooled", "--index", "memory", "--json", str(out)]) == 0
    pooled = json.loads(out.read_text())
    assert pooled["hybrid"]["settings"]["mode"] == "pooled" and pooled["hybrid"]["timing"]["stores"] == 1
    assert pooled["hybrid"]["timing"]["cache_misses"] == 0 and pooled["hybrid"]["timing"]["texts_embedded"] == 0
    assert pooled["keyword"]["overall"]["recall_any@5"] == 1.0


def test_a_file_that_is_not_longmemeval_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"question_id": "x"}]))
    assert cli_run(["bench", "longmemeval", str(path), "--method", "keyword"]) == 2
    assert "lacks" in capsys.readouterr().err


def test_the_defaults_the_benchmark_chose(mem_store: Store) -> None:
    """min-max fusion and no recency window (see the report of ``memcairn bench longmemeval``)."""
    from memcairn.wire.config import load_settings

    service = SearchService(mem_store)
    assert service.fusion == "minmax" and service.recency_window_days == 0
    assert service.recency_boost_half_life_days is None
    assert load_settings(environ={}).recency_window_days == 0
    assert lme_items.DEFAULT_GRANULARITY == "turn"


# -- robustness to inputs: any file in the LongMemEval format, clear errors for the rest ----------------------
def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_byte_order_mark_and_jsonl_are_read(tmp_path: Path) -> None:
    records = synthetic_records()
    bom = _write(tmp_path / "bom.json", "\ufeff" + json.dumps(records))
    assert [q.id for q in lme_data.load_questions(bom)] == ["q_bakery", "q_guitar", "q_bakery_abs"]
    jsonl = _write(tmp_path / "lme.jsonl", "\n".join(json.dumps(r) for r in records) + "\n\n")
    assert [q.id for q in lme_data.load_questions(jsonl, limit=2)] == ["q_bakery", "q_guitar"]
    broken = _write(tmp_path / "broken.jsonl", json.dumps(records[0]) + "\n" + json.dumps(records[1]) + "\n{oops\n")
    with pytest.raises(ValidationError, match="line 3"):
        lme_data.load_questions(broken)
    with pytest.raises(ValidationError, match="is not JSON"):
        lme_data.load_questions(_write(tmp_path / "prose.json", "hello world"))
    latin = tmp_path / "latin.json"
    latin.write_bytes(b"[\xe9]")
    with pytest.raises(ValidationError, match="not UTF-8"):
        lme_data.load_questions(latin)


def test_dates_with_seconds_and_before_1970() -> None:
    assert lme_data.parse_date("2023/05/20 (Sat) 02:21:30") == lme_data.parse_date("2023/05/20 (Sat) 02:21") + 30_000
    with pytest.raises(ValidationError, match="before 1970"):
        lme_data.parse_date("1969/12/31 (Wed) 23:59")


def test_fields_of_the_wrong_shape_name_the_record_and_the_question() -> None:
    good = synthetic_records()[0]
    cases = [
        ({"answer_session_ids": "a_bakery"}, "record 1, question q_bakery: answer_session_ids must be a list"),
        ({"answer_session_ids": 5}, "record 1, question q_bakery: answer_session_ids must be a list"),
        ({"question": None}, "record 1, question q_bakery: question must be a non-empty string"),
        ({"haystack_session_ids": ["", *good["haystack_session_ids"][1:]]},
         "record 1, question q_bakery, session 0: the haystack session id must be a non-empty string"),
    ]
    for change, message in cases:
        with pytest.raises(ValidationError, match=message):
            lme_data.parse_questions([synthetic_records()[1], {**good, **change}])
    with pytest.raises(ValidationError, match=r"record 0 \(question q_bakery\) lacks haystack_dates"):
        lme_data.parse_questions([{k: v for k, v in good.items() if k != "haystack_dates"}])
    # answers that are numbers or lists, numeric ids and turns with extra keys or no role are all accepted
    numeric = {**good, "question_id": 7, "answer": 3, "haystack_sessions": [
        [{"content": "no role here", "extra": 1}], *good["haystack_sessions"][1:]]}
    first, second = lme_data.parse_questions([numeric, {**good, "answer": ["a", 1]}])
    assert first.id == "7" and first.sessions[0].turns == (("user", "no role here"),)
    assert second.answer_ids == ("a_bakery",)


def test_oversized_messages_are_cut_into_pieces_not_refused() -> None:
    from memcairn.store.validation import validate_item

    long = "word " * 60_000  # 300,000 bytes: over the store's 256 KiB per field
    session = lme_data.Session("big", 1_000, (("user", "short question"), ("assistant", long), ("assistant", long),
                                         ("user", long)))
    for granularity in lme_items.GRANULARITIES:
        items = lme_items.session_items(session, granularity)
        for item in items:
            validate_item(item)  # raises on an oversized field
        stored = "".join(t for i in items for t in (i.narrative or "", i.text or "", *(i.facts or ())))
        expected = "short question" + long.strip() * (3 if granularity != "user" else 1)
        assert stored.replace("\n\n", "") == expected, granularity


def test_repeated_question_ids_and_differing_pooled_sessions_lose_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    bakery = _record("q1", "single-session-user", "Which bakery does my cousin Ines run?", {
        **FILLER, "a": [_turn("user", "My cousin Ines opened a sourdough bakery in Leeds.")]}, ["a"])
    # the same question id again, and a session id "a" whose contents differ
    dog = _record("q1", "single-session-user", "What is my dog called?", {
        **FILLER, "a": [_turn("user", "My dog is called Biscuit, a beagle.")]}, ["a"])
    questions = lme_data.parse_questions([bakery, dog])
    for pooled in (False, True):
        messages: list[str] = []
        result = lme.run(questions, lme.Options(methods=("keyword",), pooled=pooled), progress=messages.append)
        keyword = result["keyword"]
        assert keyword["overall"]["n"] == 2 and keyword["overall"]["recall_any@1"] == 1.0, pooled
        assert [d["gold_ranks"] for d in keyword["questions"]] == [[1], [1]]
        if pooled:
            assert "1 more version(s) of a session id" in messages[0]


def test_answer_sessions_outside_the_haystack_are_named() -> None:
    record = _record("q1", "multi-session", "Which bakery?", {**FILLER}, ["nowhere", "f_garden"])
    messages: list[str] = []
    lme.run(lme_data.parse_questions([record]), lme.Options(methods=("keyword",)), progress=messages.append)
    assert messages[0].startswith("warning: 1 question(s)") and "q1 (nowhere)" in messages[0]


def test_the_command_reports_bad_input_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path / "bad.json", json.dumps([{**synthetic_records()[0], "answer_session_ids": 5}]))
    assert cli_run(["bench", "longmemeval", str(bad), "--method", "keyword"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: record 0, question q_bakery: answer_session_ids must be a list of session ids, got 5"


def test_nothing_to_score_still_writes_well_formed_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _write(tmp_path / "abs.json", json.dumps(synthetic_records()[2:]))
    out = tmp_path / "out.json"
    assert cli_run(["bench", "longmemeval", str(data), "--method", "keyword", "--quiet", "--json", str(out)]) == 0
    assert "0 of 1 questions scored" in capsys.readouterr().out
    result = json.loads(out.read_text())
    assert set(result["keyword"]) >= {"overall", "by_type", "timing"}
    assert result["keyword"]["overall"] == {"n": 0} and result["keyword"]["by_type"] == {}


def test_the_keyword_index_copy_ranks_the_questions_alike(data_file: Path) -> None:
    """``--keyword-index`` ranks from the worker's in-memory copy: every question's ranking is the same."""
    questions = lme_data.load_questions(data_file, None)
    for pooled in (False, True):
        runs = [lme.run(questions, lme.Options(methods=("keyword",), pooled=pooled, keyword_index=on))["keyword"]
                for on in (False, True)]
        assert [q["top"] for q in runs[0]["questions"]] == [q["top"] for q in runs[1]["questions"]], pooled
        assert runs[0]["overall"] == runs[1]["overall"]
        assert [r["settings"]["keyword_ranking"] for r in runs] == ["sqlite", "in-memory copy"]
