"""The one token estimate behind every cost memcairn reports (standard library only).

A token is counted as four characters of the text an agent actually reads (rounded to the nearest). That is
the usual rule of thumb for English prose and code under the BPE tokenizers agents use; it is an estimate,
not a tokenizer, and every figure memcairn prints uses this same function on the same text the agent will
receive: the context budget, the ``~N tok`` beside an index row (the cost of that memory's full record as
``get_observations`` returns it) and the benchmark's token columns. So the figures agree with each other
even where they differ from a particular model's count.
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4


def tokens_for_chars(chars: int) -> int:
    """Tokens of ``chars`` characters of text (0 for none)."""
    return round(max(0, chars) / CHARS_PER_TOKEN)


def estimate_tokens(text: str) -> int:
    """Tokens an agent pays to read ``text``."""
    return tokens_for_chars(len(text))
