"""Ids that stay unique and keep growing when tenants live on, and move between, several clusters.

Ids are identities clients hold (a memory's id, an SSE client's change sequence number), so a tenant's rows keep
their ids when it moves. Each cluster ``index`` of ``count`` therefore hands out only ids ``≡ index (mod
count)`` (``interleave``: every identity sequence steps by ``count``), so two clusters never hand out the
same id; and a move first advances the target's sequences past the source's (``advance_past``), so the moved
tenant's new ids and change sequence numbers stay above its old ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

# table.column, its sequence, the sequence's last value (read from the sequence itself: pg_sequences shows NULL
# before the first nextval) and its step, for every identity column of the public schema, in one query.
_SEQUENCES = (
    "SELECT c.relname || '.' || a.attname, q.seq, (pg_sequence_last_value(q.seq::regclass)), p.seqincrement,"
    " p.seqstart FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace,"
    " LATERAL (SELECT pg_get_serial_sequence(quote_ident(c.relname), a.attname) AS seq) q"
    " JOIN pg_sequence p ON p.seqrelid = q.seq::regclass"
    " WHERE n.nspname = 'public' AND a.attidentity <> '' AND NOT a.attisdropped ORDER BY 1")


@dataclass(frozen=True)
class Sequence:
    column: str
    name: str
    last_value: int
    step: int


def sequences(conn: psycopg.Connection) -> list[Sequence]:
    """Every identity column's sequence, with its last value (its start before its first use) and step."""
    return [Sequence(str(column), str(name), int(last if last is not None else start), int(step))
            for column, name, last, step, start in conn.execute(_SEQUENCES).fetchall()]


def _aligned(floor: int, index: int, count: int) -> int:
    """The smallest value at or above ``floor`` (and 1) that is ``≡ index (mod count)``."""
    value = max(floor, 1)
    return value + (index - value) % count


def interleave(conn: psycopg.Connection, index: int, count: int) -> None:
    """Make this cluster hand out ids ``≡ index (mod count)`` from now on (run once, as the owner, before the
    cluster takes tenants; running it again with the same numbers changes nothing)."""
    if not 0 <= index < count:
        raise ValueError(f"cluster index {index} is not in 0..{count - 1}")
    with conn.transaction():
        for seq in sequences(conn):
            conn.execute(f"ALTER SEQUENCE {seq.name} INCREMENT BY {int(count)} MINVALUE 1")  # a catalogue name
            conn.execute("SELECT setval(%s, %s, true)", (seq.name, _aligned(seq.last_value, index, count)))


def last_values(conn: psycopg.Connection) -> dict[str, int]:
    return {seq.column: seq.last_value for seq in sequences(conn)}


def advance_past(conn: psycopg.Connection, floors: dict[str, int], *, margin: int = 0) -> int:
    """Move each identity sequence of this cluster past ``floors`` (another cluster's ``last_values``) plus
    ``margin``, keeping its residue; never moves one back. How many it moved (two queries when none)."""
    moved = 0
    with conn.transaction():
        for seq in sequences(conn):
            wanted = floors.get(seq.column, 0)
            if wanted > seq.last_value:
                conn.execute("SELECT setval(%s, %s, true)",
                             (seq.name, _aligned(wanted + margin, seq.last_value % seq.step, seq.step)))
                moved += 1
    return moved
