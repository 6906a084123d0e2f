"""Dead ends: a hypothesis the agent stated and later said did not hold, in its own words.

"I think the cache is stale" … "it wasn't the cache, it was the tz offset": the first sentence is what was
tried, not what was learned. A hypothesis is a sentence that hedges (``I think``, ``probably``, ``might be``,
``I suspect``, ``seems``); it is refuted by a later sentence that negates a cause or a guess (``wasn't the``,
``not the issue``, ``ruled out``, ``red herring``, ``was wrong``) and names something the hypothesis named (a
code name, a path, a word of four letters or more that is not a common one). Both must be in the same stretch of
narration (a turn's), the refutation after the hypothesis. A summary keeps such a hypothesis out of what was
learned and says under what was investigated that it was ruled out, and why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memcairn.capture.offline import narration

HEDGE = re.compile(
    r"\b(?:I think|I suspect|I believe|I bet|I guess|my (?:guess|hunch|hypothesis|theory|suspicion)|suspect(?:ed)?"
    r"|probably|likely|might be|may be|could be|maybe|perhaps|presumably|possibly|it seems|seems (?:like|to be)"
    r"|appears to be|looks like (?:the|a|an|it)|hypothes[ie]s)\b",
    re.IGNORECASE)
REFUTES = re.compile(
    r"\b(?:(?:was|is|were|are)(?:n't| not) (?:actually |really )?(?:the |a |an |due to |caused by |because of )"
    r"|not (?:actually |really )?(?:the|a|an) (?:\w+[ -]){0,3}?(?:issue|problem|cause|culprit|reason|bug|source)\b"
    r"|not (?:caused by|due to|because of|related to)|rul(?:ed|ing|e) out|red herring|false alarm|dead end"
    r"|(?:guess|hunch|hypothesis|theory|suspicion|assumption|initial (?:thought|read)) (?:was|is) (?:wrong|incorrect)"
    r"|wrong about|(?:that|this|it)(?:'s| is| was) not it|turns out (?:it|that|this) (?:was|is)(?:n't| not)"
    r"|(?:is|was|are|were) (?:fine|ok|okay|correct|not the problem) after all|not what (?:caused|broke))",
    re.IGNORECASE)
_NAME = re.compile(r"`([^`\n]{2,})`|\b([A-Za-z_][\w./-]*[\w])\b")
# words too common to tie a refutation to a hypothesis
_COMMON = frozenset("""
about after again also because been before being between both cause caused could didn doesn does done each
either error errors even ever every failing fails fine first from have here instead into issue just like likely
look looked looks made make maybe might more most much must need never next only other perhaps possibly
probably problem really reason right same seem seems should since some something still such suspect than that
their them then there these they thing think this those though through thought turns under until very wasn
were what when where which while will with would wrong yeah actually culprit guess hunch hypothesis theory
test tests code file files line lines call calls work works working value values case
""".split())


@dataclass(frozen=True)
class DeadEnd:
    hypothesis: str
    refutation: str

    @property
    def said(self) -> str:
        """``Ruled out: <hypothesis> (<refutation>)``: what was tried and why it did not hold."""
        return f"Ruled out: {self.hypothesis.rstrip('.')} ({self.refutation.rstrip('.')})"


def _names(sentence: str) -> set[str]:
    out = set()
    for code, word in _NAME.findall(sentence):
        name = (code or word).strip().lower()
        if code or (len(name) >= 4 and name not in _COMMON):
            out.add(name)
    return out


def dead_ends(texts: Sequence[str | None]) -> list[DeadEnd]:
    """The hypotheses of ``texts`` (in order) that a later sentence of them refutes, each once."""
    sentences = [s.text for text in texts for s in narration.read(text)]
    found: list[DeadEnd] = []
    taken: set[int] = set()
    for n, sentence in enumerate(sentences):
        if not REFUTES.search(sentence) or HEDGE.search(sentence):
            continue
        named = _names(sentence)
        for m in range(n - 1, -1, -1):
            earlier = sentences[m]
            if m in taken or not HEDGE.search(earlier) or REFUTES.search(earlier):
                continue
            if named & _names(earlier):
                taken.add(m)
                found.append(DeadEnd(earlier, sentence))
                break
    return sorted(found, key=lambda d: sentences.index(d.hypothesis))
