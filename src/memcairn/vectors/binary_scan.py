"""Sign-bit codes of every document, per project partition: a fast approximate first pass for a KNN.

Each vector becomes one bit per dimension (``x > 0``), packed into ``ceil(d / 64)`` 64-bit words (6 for
384-d MiniLM, 48 bytes a document). The Hamming distance between two codes tracks the angle between the
vectors well enough that the true nearest neighbours of a query sit among the few thousand codes
nearest to its own: `candidates` finds those by scanning every code of the searched partitions (a few
ms for 300,000 documents). Each document also keeps its components as int8 (scaled so the largest is
127) and a multiplier that turns their dot product with the query into its cosine, within ~1e-3:
`shortlist` orders the candidates by that and hands the best few to the caller, which reads only those
float vectors to rank them exactly. Each document also names its owner, the SQLite row it is a field of, so
a shortlist can keep one document per row.

Codes are stored word-major (``codes[w]`` holds word ``w`` of every document of a partition), so the
scan is ``d / 64`` passes of xor + popcount over contiguous arrays. Changes land in a per-partition
``pending`` dict (rowid -> its entries, or None for a removal; last change wins) that is folded into the arrays
by the next `size`/`candidates` of that partition, or once it holds more than 4096 changes and a quarter
of the partition: single upserts never copy a whole partition.

A scan starts *unbuilt*: changes are recorded while `build` reads the existing rows (from another
thread, possibly from a snapshot taken after some of those changes), then `build` installs the rows and
replays the recorded changes over them. Replaying a change the snapshot already holds is harmless, so
the result is the current state as long as recording started before the snapshot was taken.

The partitions are guarded by the scan's own lock (`build` reads and encodes without it and takes it
only to install); no method calls out while holding it. A merge replaces a partition's arrays and never
writes into them, so `candidates` scans them after releasing the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

_BATCH = 1024  # rows encoded at once by build
_SAMPLE_STRIDE = 16  # `nearest` estimates the cut-off from every 16th distance of a long array
_MIN_MERGE = 4096  # pending changes a partition accepts before folding them in without a query

# numpy >= 2 counts bits natively; older ones use a byte table.
_BITWISE_COUNT: Callable[..., np.ndarray] | None = getattr(np, "bitwise_count", None)
_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def _popcount2d(words: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 of a 2-d C-contiguous array, as uint8 of the same shape."""
    if _BITWISE_COUNT is not None:
        return _BITWISE_COUNT(words)
    return _POP8[words.view(np.uint8)].reshape(*words.shape, 8).sum(axis=2, dtype=np.uint8)


class _Encoded(NamedTuple):
    """One document's entries: its sign bits, its int8 components, their cosine multiplier and its owner."""

    code: np.ndarray  # (words,) uint64
    q8: np.ndarray  # (d,) int8
    mult: float  # scale / |x|: cos(q, x) ~= (q . q8) * mult / |q|
    owner: int  # the row the document belongs to (see `owner_of`)


class _Partition:
    __slots__ = ("codes", "mult", "owners", "pending", "q8", "rowids")

    def __init__(self, words: int, dimension: int) -> None:
        self.rowids = np.empty(0, dtype=np.int64)
        self.codes = np.empty((words, 0), dtype=np.uint64)
        self.q8 = np.empty((0, dimension), dtype=np.int8)
        self.mult = np.empty(0, dtype=np.float32)
        self.owners = np.empty(0, dtype=np.int64)
        self.pending: dict[int, _Encoded | None] = {}

    def merge(self) -> None:
        if not self.pending:
            return
        changed = np.fromiter(self.pending, dtype=np.int64, count=len(self.pending))
        keep = ~np.isin(self.rowids, changed)
        added = [(rowid, enc) for rowid, enc in self.pending.items() if enc is not None]
        rowids, codes, q8 = [self.rowids[keep]], [self.codes[:, keep]], [self.q8[keep]]
        mult, owners = [self.mult[keep]], [self.owners[keep]]
        if added:
            rowids.append(np.fromiter((r for r, _ in added), dtype=np.int64, count=len(added)))
            codes.append(np.stack([e.code for _, e in added], axis=1))
            q8.append(np.stack([e.q8 for _, e in added]))
            mult.append(np.array([e.mult for _, e in added], dtype=np.float32))
            owners.append(np.array([e.owner for _, e in added], dtype=np.int64))
        self.rowids = np.concatenate(rowids)
        self.codes = np.ascontiguousarray(np.concatenate(codes, axis=1))
        self.q8 = np.concatenate(q8)
        self.mult = np.concatenate(mult)
        self.owners = np.concatenate(owners)
        self.pending = {}


class _Filling:
    """A partition being built: arrays allocated for the expected size, grown by doubling past it."""

    def __init__(self, words: int, dimension: int, expected: int) -> None:
        capacity = max(int(expected), 256)
        self.rowids = np.empty(capacity, dtype=np.int64)
        self.codes = np.empty((words, capacity), dtype=np.uint64)
        self.q8 = np.empty((capacity, dimension), dtype=np.int8)
        self.mult = np.empty(capacity, dtype=np.float32)
        self.owners = np.empty(capacity, dtype=np.int64)
        self.n = 0

    def put(self, rowids: np.ndarray, codes: np.ndarray, q8: np.ndarray, mult: np.ndarray,
            owners: np.ndarray) -> None:
        end = self.n + len(rowids)
        if end > len(self.rowids):
            capacity = max(2 * len(self.rowids), end)
            self.rowids = _grown(self.rowids, self.n, (capacity,))
            self.codes = _grown(self.codes.T, self.n, (capacity, self.codes.shape[0])).T
            self.q8 = _grown(self.q8, self.n, (capacity, self.q8.shape[1]))
            self.mult = _grown(self.mult, self.n, (capacity,))
            self.owners = _grown(self.owners, self.n, (capacity,))
        self.rowids[self.n : end] = rowids
        self.codes[:, self.n : end] = codes.T
        self.q8[self.n : end] = q8
        self.mult[self.n : end] = mult
        self.owners[self.n : end] = owners
        self.n = end

    def partition(self) -> _Partition:
        part = _Partition(self.codes.shape[0], self.q8.shape[1])
        n = self.n
        if n == len(self.rowids):  # allocated for the size the caller expected: no copy
            part.rowids, part.q8, part.mult, part.owners = self.rowids, self.q8, self.mult, self.owners
        else:
            part.rowids, part.q8 = self.rowids[:n].copy(), self.q8[:n].copy()
            part.mult, part.owners = self.mult[:n].copy(), self.owners[:n].copy()
        part.codes = np.ascontiguousarray(self.codes[:, :n])
        return part


def nearest(dist: np.ndarray, n: int, top: int) -> np.ndarray:
    """Positions, ascending, of the ``n`` smallest of ``dist`` (integers in 0..top; ties at the cut-off go to
    the earliest positions).

    Distances are small integers, so a histogram finds the cut-off faster than a partition. On a long array
    the histogram of every `_SAMPLE_STRIDE`-th value first bounds the cut-off generously, and only the values
    under that bound are counted exactly: the same answer, without converting every distance for
    ``bincount``."""
    pool: np.ndarray | None = None
    if len(dist) > _SAMPLE_STRIDE * n:
        sample = np.cumsum(np.bincount(dist[::_SAMPLE_STRIDE], minlength=top + 1))
        bound = int(np.searchsorted(sample, 2 * n // _SAMPLE_STRIDE + 1))
        pool = np.flatnonzero(dist <= bound)
        if len(pool) < n:  # the sample misjudged the spread: count everything
            pool = None
    values = dist if pool is None else dist[pool]
    cumulative = np.cumsum(np.bincount(values, minlength=top + 1))
    cut = int(np.searchsorted(cumulative, n))  # smallest distance d with count(<= d) >= n
    room = n - int(cumulative[cut - 1]) if cut > 0 else n  # how many at the cut-off distance fit
    below = np.flatnonzero(values < cut)
    at = np.flatnonzero(values == cut)[:room]
    chosen = np.sort(np.concatenate([below, at]))
    return chosen if pool is None else pool[chosen]


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def owner_of(rowid: int, owner: int | None) -> int:
    """The key that groups a document with the other documents of its row: the row's id when known, else
    a key of the document's own (negative, so it never equals a row id)."""
    return int(owner) if owner is not None else -int(rowid)


def _row_owner(row: Sequence[Any]) -> int:
    """The owner of a ``(rowid, project, vector[, owner])`` row."""
    return owner_of(row[0], row[3] if len(row) > 3 else None)


def _grown(array: np.ndarray, used: int, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, dtype=array.dtype)
    out[:used] = array[:used]
    return out


class BinaryScan:
    """Packed sign bits of every document of an index, partitioned by project (see the module doc)."""

    def __init__(self, dimension: int) -> None:
        self.dimension = int(dimension)
        self.words = (self.dimension + 63) // 64
        self._lock = threading.Lock()
        self._parts: dict[str, _Partition] = {}
        self._ready = False
        self._failed = False
        self._generation = 0  # bumped by clear/cancel: a build started before it installs nothing
        self._cancelled = False
        self._done = threading.Event()

    @classmethod
    def from_rows(cls, dimension: int, rows: Iterable[tuple[int, str, Any]]) -> BinaryScan:
        scan = cls(dimension)
        scan.build(rows)
        return scan

    # -- state

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def failed(self) -> bool:
        return self._failed

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the build finished (or failed or was cancelled); True when the scan is ready."""
        self._done.wait(timeout)
        return self._ready

    # -- encoding

    def encode(self, vectors: Any) -> np.ndarray:
        """Codes of an ``(m, d)`` array of vectors: ``(m, words)`` uint64."""
        x = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dimension)
        return self._codes(x)

    def _encode_all(self, vectors: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(codes, int8 components, cosine multipliers) of an ``(m, d)`` array of vectors.

        Each vector is scaled so its largest component is 127 and rounded: ``x ~= scale * q8``. Then
        ``cos(q, x) ~= (q . q8) * (scale / |x|) / |q|``, within about 1e-3 for 384-d unit vectors."""
        x = np.asarray(vectors, dtype=np.float32).reshape(-1, self.dimension)
        peak = np.abs(x).max(axis=1)
        scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        q8 = np.rint(x / scale[:, None]).astype(np.int8)
        norms = np.linalg.norm(x, axis=1)
        mult = np.where(norms > 0, scale / np.where(norms > 0, norms, 1.0), 0.0).astype(np.float32)
        return self._codes(x), q8, mult

    def _codes(self, x: np.ndarray) -> np.ndarray:
        bits = np.packbits(x > 0, axis=1)
        width = self.words * 8
        if bits.shape[1] != width:
            bits = np.pad(bits, ((0, 0), (0, width - bits.shape[1])))
        return np.ascontiguousarray(bits).view(np.uint64)

    # -- building

    def build(self, rows: Iterable[Sequence[Any]], sizes: Mapping[str, int] | None = None) -> bool:
        """Install every ``(rowid, project, vector[, owner])`` row (vector: a sequence of floats or a float32
        little-endian blob; owner: see `owner_of`), then replay the changes recorded since this scan was created.

        ``sizes`` (documents per project, when known) lets each partition's arrays be allocated once.
        Returns False (installing nothing) when `clear` or `cancel` ran meanwhile.
        """
        with self._lock:
            generation = self._generation
        filling: dict[str, _Filling] = {}
        batch_ids: list[int] = []
        batch_projects: list[str] = []
        batch_vecs: list[Any] = []
        batch_owners: list[int] = []

        def flush() -> None:
            codes, q8, mult = self._encode_all(self._stack(batch_vecs))
            ids = np.array(batch_ids, dtype=np.int64)
            owners = np.array(batch_owners, dtype=np.int64)
            names = np.array(batch_projects, dtype=object)
            for project in dict.fromkeys(batch_projects):
                if project not in filling:
                    filling[project] = _Filling(self.words, self.dimension, (sizes or {}).get(project, 0))
                mask = names == project
                filling[project].put(ids[mask], codes[mask], q8[mask], mult[mask], owners[mask])
            batch_ids.clear()
            batch_projects.clear()
            batch_vecs.clear()
            batch_owners.clear()

        for row in rows:
            batch_ids.append(int(row[0]))
            batch_projects.append(row[1])
            batch_vecs.append(row[2])
            batch_owners.append(_row_owner(row))
            if len(batch_ids) >= _BATCH:
                flush()
                if self._cancelled or self._generation != generation:
                    return False
        if batch_ids:
            flush()
        parts = {project: fill.partition() for project, fill in filling.items()}
        with self._lock:
            if self._cancelled or self._generation != generation:
                return False
            for project, recorded in self._parts.items():
                part = parts.setdefault(project, _Partition(self.words, self.dimension))
                part.pending = recorded.pending
            self._parts = parts
            self._ready = True
            self._done.set()
        return True

    def fail(self) -> None:
        """Mark a build as failed (unless `clear` made the scan ready meanwhile)."""
        with self._lock:
            if not self._ready:
                self._failed = True
            self._done.set()

    def cancel(self) -> None:
        """Stop a build in progress (or prevent one); the scan is not to be used any more."""
        with self._lock:
            self._cancelled = True
            self._generation += 1
            self._done.set()

    def clear(self) -> None:
        """Forget every document: the scan is then ready and empty (a build in progress is abandoned)."""
        with self._lock:
            self._generation += 1
            self._parts = {}
            self._ready = True
            self._failed = False
            self._done.set()

    # -- changes

    def add(self, rows: Sequence[Sequence[Any]]) -> None:
        """Add ``(rowid, project, vector[, owner])`` documents, or replace the entries of a rowid already in
        their project."""
        if not rows:
            return
        codes, q8, mult = self._encode_all(self._stack([row[2] for row in rows]))
        with self._lock:
            for n, row in enumerate(rows):
                self._part(row[1]).pending[int(row[0])] = _Encoded(codes[n], q8[n], float(mult[n]), _row_owner(row))
            self._fold_large()

    def remove(self, rows: Iterable[tuple[int, str]]) -> None:
        """Remove these ``(rowid, project)`` documents (unknown ones are ignored)."""
        with self._lock:
            for rowid, project in rows:
                self._part(project).pending[int(rowid)] = None
            self._fold_large()

    # -- queries

    def size(self, projects: Sequence[str] | None = None) -> int:
        """Documents in these partitions (every partition when None)."""
        with self._lock:
            return sum(len(part.rowids) for part in self._merged(projects))

    def candidates(self, vector: Any, projects: Sequence[str] | None, n: int) -> np.ndarray:
        """Rowids of the ``n`` documents of these partitions (all when None) whose codes are nearest the
        vector's by Hamming distance (ties at the boundary broken arbitrarily), in no particular order."""
        chosen = self._select(vector, projects, n)
        if not chosen:
            return np.empty(0, dtype=np.int64)
        return _joined([part.rowids[rows] for part, rows in chosen])

    def shortlist(self, vector: Any, projects: Sequence[str] | None, n: int, keep: int, *,
                  per_owner: bool = False) -> np.ndarray:
        """Of the ``n`` `candidates`, the rowids of the ``keep`` nearest by the int8 cosine (best first):
        what the caller re-ranks exactly, instead of reading all ``n`` float vectors.

        ``per_owner`` keeps only the best candidate of each owner (the row its documents belong to), so
        ``keep`` documents name ``keep`` different rows."""
        chosen = self._select(vector, projects, n)
        if not chosen or keep <= 0:
            return np.empty(0, dtype=np.int64)
        q = np.asarray(vector, dtype=np.float32).reshape(self.dimension)
        rowids = _joined([part.rowids[rows] for part, rows in chosen])
        q8 = _joined([part.q8[rows] for part, rows in chosen])  # one conversion and product for all
        cos = (q8.astype(np.float32) @ q) * _joined([part.mult[rows] for part, rows in chosen])
        if per_owner:
            owners = _joined([part.owners[rows] for part, rows in chosen])
            order = np.argsort(-cos, kind="stable")
            _, first = np.unique(owners[order], return_index=True)  # each owner's best, by position in order
            best = order[np.sort(first)]
            rowids, cos = rowids[best], cos[best]
        if keep < len(rowids):
            best = np.argpartition(-cos, keep - 1)[:keep]
            return rowids[best[np.argsort(-cos[best])]]
        return rowids[np.argsort(-cos)]

    def _select(self, vector: Any, projects: Sequence[str] | None, n: int) -> list[tuple[_Partition, np.ndarray]]:
        """The ``n`` documents nearest by Hamming distance, as (partition, row indices) pairs."""
        query = self.encode(vector)[0]
        with self._lock:  # a merge replaces a partition's arrays, it never writes into them
            parts = [self._snapshot(p) for p in self._merged(projects) if len(p.rowids)]
        if n <= 0 or not parts:
            return []
        if n >= sum(len(p.rowids) for p in parts):
            return [(p, np.arange(len(p.rowids))) for p in parts]
        dists = [self._hamming(p.codes, query) for p in parts]
        flat = np.concatenate(dists) if len(dists) > 1 else dists[0]
        picked = nearest(flat, n, self.words * 64)
        if len(parts) == 1:
            return [(parts[0], picked)]
        starts = np.cumsum([0] + [len(d) for d in dists])
        bounds = np.searchsorted(picked, starts)
        return [(part, picked[bounds[i]:bounds[i + 1]] - starts[i])
                for i, part in enumerate(parts) if bounds[i + 1] > bounds[i]]

    @staticmethod
    def _snapshot(part: _Partition) -> _Partition:
        """The partition's current arrays (a merge replaces them; callers read these after the lock)."""
        view = _Partition.__new__(_Partition)
        view.rowids, view.codes, view.q8, view.mult = part.rowids, part.codes, part.q8, part.mult
        view.owners, view.pending = part.owners, {}
        return view

    # -- internals

    @staticmethod
    def _stack(vectors: Sequence[Any]) -> np.ndarray:
        if vectors and isinstance(vectors[0], bytes | bytearray | memoryview):
            return np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), -1)
        return np.asarray(vectors, dtype=np.float32)

    def _part(self, project: str) -> _Partition:
        part = self._parts.get(project)
        if part is None:
            part = self._parts[project] = _Partition(self.words, self.dimension)
        return part

    def _fold_large(self) -> None:
        if not self._ready:  # recorded changes must survive until build replays them
            return
        for part in self._parts.values():
            if len(part.pending) > max(_MIN_MERGE, len(part.rowids) // 4):
                part.merge()

    def _merged(self, projects: Sequence[str] | None) -> list[_Partition]:
        if projects is None:
            parts = list(self._parts.values())
        else:
            parts = [self._parts[p] for p in dict.fromkeys(projects) if p in self._parts]
        if self._ready:  # while unbuilt, pending holds the recorded changes build replays
            for part in parts:
                part.merge()
        return parts

    def _hamming(self, codes: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Hamming distance of each code to the query: one xor and one popcount over the whole (words, n)
        array (a handful of numpy calls per partition, not three per word: a query over all projects scans
        every partition)."""
        bits = _popcount2d(np.bitwise_xor(codes, query[:, None]))
        return bits.sum(axis=0, dtype=np.uint16)
