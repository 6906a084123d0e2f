"""The MCP tools' one definition each (``memcairn.mcp.tools``): the schema ``tools/list`` serves is the one the MCP
SDK's ``func_metadata`` makes of it, argument checking follows the same signature, and ``search`` speaks the HTTP
API's words (``kind`` for a record's kind, ``type`` for an observation's), still reading the earlier ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from mcp_helpers import recorded

from memcairn.core.tokens import estimate_tokens
from memcairn.mcp import schema as mcp_schema
from memcairn.mcp import tools as mcp_tools
from memcairn.mcp.schema import TOOL_ENTRIES
from memcairn.mcp.tools import TOOL_NAMES, MemoryTools, arguments_model, checked_arguments


def test_the_served_schema_is_the_one_generated_from_the_typed_definitions() -> None:
    """After changing a tool's signature or description: ``python -m memcairn.mcp.tools`` rewrites it."""
    assert Path(mcp_schema.__file__).read_text(encoding="utf-8") == mcp_tools.schema_module()
    assert [t["name"] for t in TOOL_ENTRIES] == list(TOOL_NAMES)


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_calls_are_checked_by_the_model_the_sdk_makes_of_the_same_signature(name: str) -> None:
    sdk = func_metadata(getattr(MemoryTools, name), skip_names=("self",), structured_output=False).arg_model
    assert arguments_model(name).model_json_schema() == sdk.model_json_schema(by_alias=True)


def test_the_tool_definitions_cost_under_1150_tokens() -> None:
    """Every session that loads the server pays for them, as sent on the wire (the seven tools before ``correct``
    cost 998; it costs ~100)."""
    wire = json.dumps(TOOL_ENTRIES, separators=(",", ":"), ensure_ascii=False)
    assert estimate_tokens(wire) < 1150


def _search_params(arguments: dict[str, Any]) -> dict[str, Any]:
    error, text, sent = recorded("search", arguments)
    assert not error, text
    ((path, params),) = sent
    assert path == "/api/search"
    return {k: params[k] for k in ("kind", "type")}


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"kind": "summaries", "type": "decision"}, {"kind": "summary", "type": "decision"}),
    ({"kind": "observations"}, {"kind": "observation,manual", "type": None}),
    ({"type": "bugfix"}, {"kind": None, "type": "bugfix"}),
    # the spellings from before: type named the kind, obs_type the observation's type
    ({"type": "prompts"}, {"kind": "prompt", "type": None}),
    ({"type": "observations", "obs_type": "decision"}, {"kind": "observation,manual", "type": "decision"}),
    ({"obs_type": "bugfix"}, {"kind": None, "type": "bugfix"}),
    ({"kind": "summaries", "type": "decision", "obs_type": "bugfix"}, {"kind": "summary", "type": "decision"}),
])
def test_search_takes_kind_and_type_as_http_does_and_the_earlier_names(arguments: dict[str, Any],
                                                                       expected: dict[str, Any]) -> None:
    assert _search_params(arguments) == expected


@pytest.mark.parametrize(("name", "arguments", "expected"), [
    ("search", {"kind": "everything"}, "kind must be one of observations, summaries, prompts, all; got 'everything'"),
    ("search", {"order_by": "best"}, "order_by must be one of relevance, newest, oldest; got 'best'"),
    ("search", {"min_score": -1}, "min_score must be a number >= 0, got -1"),
    ("search", {"concepts": {"a": 1}}, 'concepts must be text, got {"a": 1}'),
    ("save_memory", {"title": "no text"}, "text is required: Self-contained text."),
    ("forget", {"ids": ["team#3"]}, '"team#3" is a team server\'s memory; this tool takes local ids (#12)'),
])
def test_arguments_are_checked_with_messages_that_say_what_to_send(name: str, arguments: dict[str, Any],
                                                                  expected: str) -> None:
    with pytest.raises(mcp_tools.ToolError) as refused:
        checked_arguments(name, arguments)
    assert str(refused.value) == expected


def test_loose_values_are_read_as_meant() -> None:
    assert checked_arguments("search", {"obs_type": 3, "limit": "5", "files": ["a", "b"], "min_score": "0"}) == {
        "type": "3", "limit": 5, "files": "a,b", "min_score": 0.0}
    assert checked_arguments("get_observations", {"ids": "#12, 15 team#3, 12"}) == {"ids": [12, 15, "team#3"]}
