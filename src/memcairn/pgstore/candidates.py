"""What one request has read of its search's candidates: their creation times and keyword evidence.

The search service asks a store for the creation times of the semantic leg's hits, then of the keyword leg's
others, then for the keyword evidence of the candidates it ranks (``search.service``): three reads of the same
rows. The team store reads the three in one statement (``KeywordLeg.candidates``) when it knows the query in
time: a ``TenantStore`` bound to a request notes the query and the hits of each leg as they are read, reads the
times and evidence of every noted candidate with the first times asked for, and answers the later asks from here.

An answer from here is exact: a time read within projects ``S`` answers for a scope that holds ``S`` (every
project, or more projects), an id missing within ``S`` answers only for a scope within ``S``; anything else is
read again. A bound store lives for one request (one transaction) and never writes, so nothing kept here
goes stale.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from memcairn.store.records import QueryTerms

Scope = frozenset[int]  # the project ids a read was made within


class CandidateReads:
    """The times and keyword evidence a request has read, by id, and the query they were read for."""

    def __init__(self) -> None:
        self.query: str | None = None
        self.scope: Scope = frozenset()  # the projects the noted query searches
        self.pending: list[int] = []  # ids the legs found, whose times and evidence are read together
        self._present: dict[int, tuple[int, Scope]] = {}  # id -> (created_at_epoch, scope it was read within)
        self._absent: dict[int, Scope] = {}  # id -> scope it was missing from
        self._terms: QueryTerms | None = None  # the query's words and their frequencies, as last read
        self._held: dict[str, set[int]] = {}  # word -> ids read holding it
        self._asked: set[int] = set()  # ids read for the noted query
        self._evidenced: set[int] = set()  # ... and found in its projects (their evidence is known)

    def note(self, query: str, scope: Sequence[int], found: Iterable[int]) -> None:
        """A leg searched ``query`` in the projects ``scope`` and found ``found``."""
        key = frozenset(scope)
        if (query, key) != (self.query, self.scope):
            self.query, self.scope = query, key
            self.pending, self._terms, self._held, self._asked, self._evidenced = [], None, {}, set(), set()
        self.pending.extend(found)

    def known(self, ids: Sequence[int], scope: Scope | None) -> dict[int, int] | None:
        """The creation times of ``ids`` within ``scope`` (None: every project) if all of them were read so as to
        answer for it, else None."""
        out: dict[int, int] = {}
        for item_id in ids:
            if (present := self._present.get(item_id)) is not None:
                epoch, read_in = present
                if scope is not None and read_in is not scope and not read_in <= scope:
                    return None
                out[item_id] = epoch
            elif (read_in := self._absent.get(item_id)) is not None:
                if scope is None or (read_in is not scope and not scope <= read_in):
                    return None
            else:
                return None
        return out

    def to_read(self, ids: Sequence[int]) -> list[int]:
        """``ids`` and the noted candidates whose evidence is not read yet, once each."""
        return list(dict.fromkeys([*ids, *(i for i in self.pending if i not in self._asked)]))

    def record(self, ids: Sequence[int], created: Mapping[int, int], terms: QueryTerms) -> None:
        """What a read of ``ids`` within the noted scope found (the times of those that exist, their evidence)."""
        for item_id in ids:
            if item_id in created:
                self._present[item_id] = (created[item_id], self.scope)
            else:
                self._absent[item_id] = self.scope
        self._asked.update(ids)
        self._evidenced.update(i for i in ids if i in created)  # a row outside the projects has no evidence here
        self._terms = terms
        for word, held in terms.holding.items():
            self._held.setdefault(word, set()).update(held)

    def terms(self, query: str, ids: Sequence[int]) -> QueryTerms | None:
        """The keyword evidence of ``ids`` for ``query`` if every one of them was read in the noted projects, else
        None."""
        if query != self.query or self._terms is None or not set(ids) <= self._evidenced:
            return None
        wanted = set(ids)
        return QueryTerms(self._terms.tokens, self._terms.frequencies, self._terms.total,
                          {word: self._held.get(word, set()) & wanted for word in self._terms.tokens})
