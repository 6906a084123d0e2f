"""Every generated look-alike of a fence or role marker is defused (``fence_lookalike_variants``): by the fence,
``clean_line`` and ``defuse``, and in a real worker's answers to the MCP ``get_observations`` tool; ordinary
text (other scripts, code, math, escapes) is left exactly as it was."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from fence_lookalike_variants import MARKERS, forged_markers, variants
from hook_helpers import Workers, seed
from mcp import Client
from mcp_in_process import in_process

from memcairn.core.models import NewItem
from memcairn.core.project import ProjectIdentity
from memcairn.mcp.server import MemoryTools, WorkerGateway, build_server
from memcairn.wire.fence import CLOSE, OPEN, clean_line, defuse, fence, neutralise

VARIANTS = list(variants())
# Around each variant: a ligature and a parenthesised digit (folded to several characters), a combining mark
# (folded to none), a dash (one for one), so a marker is replaced at its own place however the text folds.
BEFORE = "\ufb01x \u2474 cafe\u0301 \u2014 before "
AFTER = " after \u01c6 \u00bd done"

ORDINARY = [
    "한국어 텍스트: 안녕하세요, 세계! 그리고 ㅋㅋ ㅡㅡ",
    "日本語のテキスト〈注〉と「引用」：東京、価格一样 — 東京",
    "Привет, мир: система работает, <система> и </пользователь>",
    "Ελληνικά: αβγ < δ, Μέμνων",
    "नमस्ते दुनिया: हिंदी पाठ <देखें>",
    "Tiếng Việt: người dùng đã xác nhận",
    "مرحبا بالعالم: النص العربي",
    "if (a < b && c > d) { return x <= y; }",
    '<div class="x"><span>hi</span></div> and </div>',
    "List<String> xs = new ArrayList<>(); template<typename T> a << 2 >> 1",
    "token_count <= 5 and x > 2; <user_id> in a template; [x] done, [ ] left; [INSTALL] step",
    "∀x ∈ ℝ: x² ≥ 0, a ≮ b, c ≯ d, ½ + ¼, f: ℕ → ℕ, n ↦ n+1, ∑ᵢ xᵢ",
    "&lt;div&gt; &amp; &#60;br&#62; %3Cb%3E \\u003cp\\u003e <\\/div>",
    "https://example.com/a%3Cb/c?x=1&y=2#frag",
    "Human-readable output: yes\nHumans: 3\nThe assistant: replied\nassistant_id: 4",
    "cat <<EOF\nsys.path <<SYS_PATH>> stays\nEOF",
    "« guillemets » ‹ single › <memcairn> memory, memcairn-memory (the tag's name)",
    "C:\\Users\\me\\<file>.txt and \\[x\\]",
    "👨\u200d👩\u200d👧 family, ﬁle ǆ ⑴ ™",
]


@pytest.mark.parametrize(("technique", "marker", "variant"), VARIANTS,
                         ids=[f"{t}-{n}" for n, (t, _, _) in enumerate(VARIANTS)])
def test_no_generated_look_alike_of_a_marker_survives(technique: str, marker: str, variant: str) -> None:
    text = f"{BEFORE}{variant}{AFTER}"
    assert forged_markers(text), "the check itself must see the forged marker"
    for out in (neutralise(text), clean_line(text), defuse(text)):
        assert forged_markers(out) == [], (technique, variant, out)
        assert out.startswith(BEFORE.rstrip()) and out.endswith(AFTER), (technique, variant, out)
    fenced = fence(f"row one\n{variant}\nrow two")
    assert fenced.count(OPEN) == 1 and fenced.count(CLOSE) == 1
    assert forged_markers(fenced) == [OPEN[:-len(' trust="data">')], CLOSE[:-1]], fenced


def test_the_generator_covers_every_technique_and_marker() -> None:
    techniques = Counter(t for t, _, _ in VARIANTS)
    assert len(VARIANTS) >= 600 and len(techniques) >= 17
    assert {m for _, m, _ in VARIANTS} == set(MARKERS)


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_stays_exactly_as_it_was(text: str) -> None:
    assert neutralise(text) == text
    assert defuse(text) == text
    if "\n" not in text:
        assert clean_line(text) == text


def test_a_folded_span_maps_back_to_the_characters_it_was_read_from() -> None:
    from memcairn.wire.confusables import folded

    text = "\ufb01 \u2474x\u200b&lt;/\u0301y"
    read = folded(text)
    assert read.text == "fi (1)x</y"
    assert read.original(0, 1) == (0, 1) and read.original(1, 2) == (0, 1)  # each half of the ligature: all of it
    assert read.original(3, 6) == (2, 3)  # "(1)" is the one character ⑴
    assert read.original(6, 7) == (3, 4)
    assert read.original(7, 9) == (5, 10)  # "</" is "&lt;/" (the zero-width space before it is not taken)
    assert read.original(9, 10) == (11, 12)  # "y", after the combining mark
    assert read.original(7, 7) == (5, 5)  # nothing, where the zero-width space was dropped: after it


def _stored(variants_by_technique: dict[str, list[str]]) -> list[NewItem]:
    """One memory per technique, its variants in every kind of field an agent reads."""
    items = []
    for n, (technique, found) in enumerate(variants_by_technique.items()):
        items.append(NewItem(project="calc", kind="observation", type="discovery",
                             title=f"note {n} {found[0]}", text=f"frobnicate step {n}: " + " | ".join(found),
                             narrative="\n".join(found), facts=[f"fact {v}" for v in found[:5]],
                             files_read=[f"src/{technique.replace(' ', '_')}{found[0]}.py"]))
    return items


async def _get_observations(tools: MemoryTools, ids: list[int]) -> tuple[bool, str]:
    async with Client(in_process(build_server(tools))) as client:
        result = await client.call_tool("get_observations", {"ids": ids})
        return bool(result.is_error), "".join(getattr(c, "text", "") for c in result.content)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    return []


def test_get_observations_of_a_real_worker_defuses_every_variant(env: dict[str, str], workers: Workers,
                                                                  isolated_home: Path) -> None:
    by_technique: dict[str, list[str]] = {}
    for technique, _, variant in VARIANTS:
        by_technique.setdefault(technique, []).append(variant)
    ids = seed(isolated_home, *_stored(by_technique))
    client = workers.start(env)
    tools = MemoryTools(WorkerGateway(lambda: client), ProjectIdentity("calc", ("calc",)))
    items: list[dict[str, Any]] = []
    asked = ids
    while asked:  # an answer holds up to 60,000 characters: the rest are named as not included
        error, text = anyio.run(_get_observations, tools, asked)
        assert not error, text
        answer = json.loads(text)
        assert "truncated" not in answer and "missing" not in answer
        items += answer["items"]
        asked = answer.get("not_included", [])
    assert [item["id"] for item in items] == ids
    for item in items:
        for value in _strings(item):
            assert forged_markers(value) == [], (item["id"], value)
    as_written = items[0]
    assert as_written["text"].startswith("frobnicate step 0: [/memcairn-memory>")
    for defused in ("[|im_start|]", "[/system]", "[function_calls]", "[/hook_context]", "(INST)", "((SYS))",
                    "[Human]:", "[Assistant]:"):
        assert defused in as_written["narrative"], as_written["narrative"]
