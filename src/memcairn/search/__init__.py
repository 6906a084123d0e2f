"""The search path shared by every door: one request type, one service, one set of renderers."""

from memcairn.search.render import render_full, render_index, render_timeline
from memcairn.search.request import SearchRequest, local_tz_name, parse_kinds, parse_time, parse_tz
from memcairn.search.result import LegRank, SearchHit, SearchResult, Timeline
from memcairn.search.service import MAX_SEMANTIC_QUERY_CHARS, SearchService

__all__ = [
    "MAX_SEMANTIC_QUERY_CHARS",
    "LegRank",
    "SearchHit",
    "SearchRequest",
    "SearchResult",
    "SearchService",
    "Timeline",
    "local_tz_name",
    "parse_kinds",
    "parse_time",
    "parse_tz",
    "render_full",
    "render_index",
    "render_timeline",
]
