"""The words inside mixed-case identifiers, so the keyword index finds ``highlightTranscriptCode`` or
``TranscriptHighlighter`` by "transcript" and "highlight".

Why: FTS5's ``unicode61`` tokenizer splits at every character that is not a letter or digit, so ``snake_case``
names and paths are found by their words, but a camelCase or PascalCase name is one token: a week-later question
asks about "highlighting transcript code", not about ``highlightTranscriptCode``. The store indexes these words in
a column of their own (``schema.FTS_WORDS``), computed by this function, which every store connection registers
(``db.connect``) under ``SQL_NAME``; the identifier itself stays indexed as it was written.
"""

from __future__ import annotations

import re

SQL_NAME = "memcairn_identifier_words"

# a token holding a lower-case letter or digit followed by a capital ("highlightTranscript", "v2Parser"), or two
# capitals followed by a lower-case letter ("HTTPServer")
_MIXED = re.compile(r"\b(?=[A-Za-z0-9]*(?:[a-z0-9][A-Z]|[A-Z]{2}[a-z]))[A-Za-z0-9]{3,}\b")
_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def identifier_words(text: str | None) -> str:
    """The words of each mixed-case identifier in ``text``, space-separated ("" when it holds none)."""
    if not text:
        return ""
    return " ".join(part for token in _MIXED.findall(text) for part in _PARTS.findall(token))
