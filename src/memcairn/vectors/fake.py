"""A deterministic stand-in for the embedding model, for fast tests of the modules around it.

``HashEmbedder`` hashes lowercase word stems (plus word bigrams, at a lower weight) into a fixed number
of signed buckets and L2-normalises the result: texts that share words get closer vectors, the same text
always gets the same vector (in every process: it uses blake2b, not ``hash()``), and nothing is loaded.
It carries no meaning beyond shared words; never use it for real search.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

_WORD = re.compile(r"[a-z0-9]+")
_SUFFIXES = ("ations", "ation", "ings", "ing", "edly", "ed", "ies", "es", "ly", "s")
_EMPTY_TOKEN = "\x00empty"


def stem(word: str) -> str:
    """A crude suffix stripper: 'fixed', 'fixes', 'fixing' -> 'fix'."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def tokens(text: str) -> list[str]:
    return [stem(w) for w in _WORD.findall(text.lower())]


class HashEmbedder:
    """Hashed bag of word stems: deterministic, unit length, ``dimension`` wide (384 like the real model)."""

    def __init__(self, dimension: int = 384, *, bigram_weight: float = 0.5) -> None:
        if dimension < 2:
            raise ValueError("dimension must be at least 2")
        self.dimension = dimension
        self.model_id = f"hash-{dimension}"
        self.bigram_weight = bigram_weight

    def _add(self, vec: list[float], feature: str, weight: float) -> None:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        sign = 1.0 if value & 1 else -1.0
        vec[(value >> 1) % self.dimension] += sign * weight

    def _embed(self, text: str) -> list[float]:
        vec = [0.0] * self.dimension
        words = tokens(text) or [_EMPTY_TOKEN]
        for word in words:
            self._add(vec, "w:" + word, 1.0)
        for left, right in zip(words, words[1:], strict=False):
            self._add(vec, f"b:{left} {right}", self.bigram_weight)
        norm = math.sqrt(sum(v * v for v in vec))
        if norm == 0.0:  # every feature cancelled out (possible, just unlikely)
            self._add(vec, "w:" + _EMPTY_TOKEN, 1.0)
            norm = math.sqrt(sum(v * v for v in vec))
        return [v / norm for v in vec]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of strings, not one string")
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)
