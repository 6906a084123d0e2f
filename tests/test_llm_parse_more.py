"""Reply parsing: inline backticks, HTML ``<details>`` captions, namespaces a model declares."""

from __future__ import annotations

import pytest

from memcairn.capture.llm import parse_observations, parse_summary
from memcairn.capture.records import CompressionFailed

SUMMARY = """<summary>
  <request>Fix the pager losing the last page</request>
  <learned>page_count used floor division</learned>
  <completed>Switched to ceiling division; tests pass</completed>
</summary>"""


# -- fences ------------------------------------------------------------------------------------------------------

def test_inline_triple_backticks_keep_the_words_around_them() -> None:
    [obs] = parse_observations("<observation><type>change</type><title>Fix ```pager``` rounding</title>"
                               "<facts><fact>use ```x``` here</fact><fact>run ```make test``` then ship</fact>"
                               "</facts></observation>")
    assert obs.title == "Fix ```pager``` rounding"
    assert obs.facts == ("use ```x``` here", "run ```make test``` then ship")


def test_a_model_wrapping_part_of_a_line_loses_nothing() -> None:
    [obs] = parse_observations("<observation><title>t</title><narrative>Set ```python timeout=5``` in the "
                               "config, then ```bash make``` passes.</narrative></observation>")
    assert obs.narrative == "Set ```python timeout=5``` in the config, then ```bash make``` passes."


@pytest.mark.parametrize("reply", [
    "```xml\n<observation><title>Pager fixed</title></observation>\n```",
    "Here it is:\n  ```xml  \n<observation><title>Pager fixed</title></observation>\n```\nDone.",
    "```xml<observation><title>Pager fixed</title></observation>```",
    "```\n<observation><title>Pager fixed</title></observation>```  \n",
])
def test_fences_around_the_whole_answer_are_still_removed(reply: str) -> None:
    assert [obs.title for obs in parse_observations(reply)] == ["Pager fixed"]
    summary = parse_summary(reply.replace("observation", "summary").replace("title", "request"))
    assert summary is not None and summary.request == "Pager fixed"


def test_a_fenced_block_inside_an_element_keeps_its_code() -> None:
    [obs] = parse_observations("<observation><title>t</title><narrative>Added:\n```python\nx = 1\n```\n"
                               "to the module.</narrative></observation>")
    assert obs.narrative == "Added: x = 1 to the module."


# -- <details> ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("before", [
    "<details><summary>Raw tool output</summary>\n<pre>ok</pre>\n</details>\n",
    "<details open>\n  <summary>Log</summary>\n  <details><summary>inner</summary>x</details>\n</details>\n",
    "Notes:\n<details>\n<summary>Click to expand</summary>\nnever closed\n",
])
def test_a_details_caption_is_not_the_session_summary(before: str) -> None:
    summary = parse_summary(before + SUMMARY)
    assert summary is not None
    assert summary.request == "Fix the pager losing the last page"
    assert summary.learned == "page_count used floor division"


def test_a_details_caption_before_a_summary_cut_off_by_the_token_limit() -> None:
    cut_off = SUMMARY[:SUMMARY.index("Switched to")]
    summary = parse_summary("<details><summary>Log</summary>ok</details>\n" + cut_off)
    assert summary is not None and summary.learned == "page_count used floor division"


def test_a_reply_holding_only_a_details_caption_has_no_summary() -> None:
    with pytest.raises(CompressionFailed) as info:
        parse_summary("<details><summary>Request: fix the pager</summary>done</details>")
    assert info.value.reason == "prose"


def test_details_mentioned_in_a_section_does_not_hide_the_summary() -> None:
    summary = parse_summary("<summary><request>Style the <details> element</request>"
                            "<learned>a <details> needs a caption</learned></summary>")
    assert summary is not None and summary.learned == "a <details> needs a caption"


# -- namespaces --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("opening", [
    '<observation xmlns="urn:memcairn">',
    '<observation xmlns="http://example.com/obs" id="1">',
    '<observation xmlns:mc="urn:memcairn">',
])
def test_a_namespace_declared_on_an_element_does_not_hide_its_children(opening: str) -> None:
    [obs] = parse_observations(opening + "<type>bugfix</type><title>Pager fixed</title>"
                               "<facts><fact>ceil division</fact></facts>"
                               "<files_modified><file>src/pager.py</file></files_modified></observation>")
    assert obs.type == "bugfix" and obs.title == "Pager fixed"
    assert obs.facts == ("ceil division",) and obs.files_modified == ("src/pager.py",)


def test_prefixed_and_nested_namespaces_are_read_as_none() -> None:
    [obs] = parse_observations('<observation xmlns:mc="urn:x"><mc:title>Pager fixed</mc:title>'
                               '<facts xmlns="urn:y"><fact>one</fact><fact>two</fact></facts></observation>')
    assert obs.title == "Pager fixed" and obs.facts == ("one", "two")
    summary = parse_summary('<summary xmlns="urn:memcairn"><request>Fix the pager</request></summary>')
    assert summary is not None and summary.request == "Fix the pager"
