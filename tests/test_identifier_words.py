"""The words of mixed-case identifiers that the keyword index holds beside the text (``store/identifiers.py``)."""

from __future__ import annotations

import pytest

from memcairn.store.identifiers import identifier_words


@pytest.mark.parametrize(("text", "words"), [
    ("Added highlightTranscriptCode(rootEl)", "highlight Transcript Code root El"),
    ("the TranscriptHighlighter hook", "Transcript Highlighter"),
    ("HTTPServer and v2Parser", "HTTP Server v 2 Parser"),
    ("hookSpecificOutput.additionalContext", "hook Specific Output additional Context"),
    ("snake_case, ALLCAPS, Capitalised and plain words", ""),  # unicode61 splits or keeps these already
    ("", ""),
    (None, ""),
])
def test_only_mixed_case_identifiers_give_words(text: str | None, words: str) -> None:
    assert identifier_words(text) == words
