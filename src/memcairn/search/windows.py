"""Windowed fusion: each candidate ranked with its neighbours in its session, and with its session as a whole.

A memory often answers a question only together with the ones around it: a reply ("last Tuesday!") to the turn
that named the subject, an observation after the one that named the file. So a relevance-ordered hybrid search
ranks each candidate of the two legs by three documents, none of them stored (the mirror stays a copy of the
rows; the windows are read from them, ``Store.session_windows``):

- **keyword window**: the candidate and its neighbours (one either side, same session and project) as one
  document, scored as BM25 scores it with every query word it holds counted once a memory
  (``idf * tf (k1 + 1) / (tf + k1)``, ``tf`` the memories of the window holding the word; no length
  normalisation: a window is three memories);
- **semantic window**: the mean of the window's similarities to the query (the similarity to the mean of their
  vectors, up to its norm: no extra embedding); a neighbour the semantic leg did not return counts as its least
  similar candidate;
- **session**: the same keyword score over the candidates and neighbours of the candidate's session.

Each is min-max normalised over the candidates (``fusion.min_max``) and they are summed with ``WEIGHTS``.

Windows help short memories and not long ones: counted once a memory, a word says as much in a two-line chat
turn as in a page-long reply, which BM25's term frequency and length normalisation tell apart. So they rank only
when the candidates' median memory is at most ``SHORT_CHARS`` (``short``); longer ones are ranked by the item
fusion (``fusion.minmax`` of the two legs) as before. Measured with the bundled model, hybrid:

- LoCoMo's five dev conversations (chat turns, median 133 characters; ``memcairn bench longmemeval``,
  RA@1 / RA@5 / RL@10): .653 / .892 / .876 with the item fusion, .720 / .925 / .891 with windows;
- the LongMemEval subset (median 441): windows alone cost RA@5 1.000 -> .979 and RL@5 .979 -> .938;
- ``memcairn bench recall`` (coding sessions): windows on every memory moved top5 from .66 to .71 overall
  (more .53 -> .56, extra .69 -> .81) but spotter from .88 to .81 (one question of 16) at 2% more tokens, so
  coding memories, being long, keep the item fusion.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from memcairn.search.fusion import min_max
from memcairn.store.records import QueryTerms, SessionWindow

K1 = 1.2
WEIGHTS = {"keyword": 1.0, "semantic": 1.0, "session": 0.5}
SHORT_CHARS = 300


def idf(terms: QueryTerms) -> dict[str, float]:
    """BM25's idf of each query word some row holds."""
    total = max(terms.total, 1)
    return {t: math.log(1 + (total - df + 0.5) / (df + 0.5))
            for t, df in zip(terms.tokens, terms.frequencies, strict=True) if df > 0}


def _bm25(ids: Iterable[int], weights: Mapping[str, float], held_by: Mapping[int, Sequence[str]]) -> float:
    tf: dict[str, int] = {}
    for i in ids:
        for token in held_by.get(i, ()):
            tf[token] = tf.get(token, 0) + 1
    return sum(weights[t] * n * (K1 + 1) / (n + K1) for t, n in tf.items())


def _normalised(values: Mapping[object, float]) -> dict[object, float]:
    keys = list(values)
    return dict(zip(keys, min_max([values[k] for k in keys]), strict=True))


def short(candidates: Sequence[int], windows: Mapping[int, SessionWindow]) -> bool:
    """Whether the candidates' median memory is short enough for windows to rank alone (module doc)."""
    sizes = sorted(windows[i].chars for i in candidates if i in windows)
    return not sizes or sizes[len(sizes) // 2] <= SHORT_CHARS


def fuse(candidates: Sequence[int], windows: Mapping[int, SessionWindow], terms: QueryTerms | None,
         similarity: Mapping[int, float], weights: Mapping[str, float] = WEIGHTS) -> dict[int, float]:
    """``{item id: fused score}`` of the candidates (module doc). ``windows`` holds every candidate's window
    (``Store.session_windows``), ``terms`` which of the windows' items hold each query word (None: no keyword
    evidence), ``similarity`` the semantic leg's similarities."""
    if not candidates:
        return {}
    word_weights = idf(terms) if terms is not None else {}
    held_by: dict[int, list[str]] = {}  # each id's query words, for windows' term frequencies
    for token in word_weights:
        for i in (terms.holding.get(token, ()) if terms is not None else ()):
            held_by.setdefault(i, []).append(token)
    floor = min(similarity.values(), default=0.0)
    keyword: dict[object, float] = {}
    semantic: dict[object, float] = {}
    members: dict[object, set[int]] = {}
    for i in candidates:
        session, ids, _ = windows.get(i, SessionWindow(None, (i,), 0))
        keyword[i] = _bm25(ids, word_weights, held_by)
        semantic[i] = sum(similarity.get(j, floor) for j in ids) / len(ids)
        members.setdefault(("s", session) if session is not None else ("i", i), set()).update(ids)
    session_score = {key: _bm25(ids, word_weights, held_by) for key, ids in members.items()}
    k, s, g = _normalised(keyword), _normalised(semantic), _normalised(session_score)
    wk, ws, wg = (weights.get(name, 0.0) for name in ("keyword", "semantic", "session"))
    out = {}
    for i in candidates:
        session = windows[i].session if i in windows else None
        out[i] = wk * k[i] + ws * s[i] + wg * g[("s", session) if session is not None else ("i", i)]
    return out
