"""Ids that stay unique and keep growing when tenants live on, and move between, several clusters.

Ids are identities clients hold (a memory's id, an SSE client's change sequence number), so a tenant's rows keep
their ids when it moves. Each cluster ``index`` of ``count`` therefore hands out only ids ``≡ index (mod
count)`` (``interleave``: every identity sequence steps by ``count``), so two clusters never hand out the
same id; and a move first advances the target's sequences past the source's (``advance_past``), so the moved
tenant's new ids and change sequence numbers stay above its old ones.
"""

from __future__ import annotations

import psycopg


def identity_sequences(conn: psycopg.Connection) -> dict[str, str]:
    """``table.column`` -> its sequence, for every identity column of the public schema."""
    rows = conn.execute(
        "SELECT table_name, column_name, pg_get_serial_sequence(quote_ident(table_name), column_name)"
        " FROM information_schema.columns WHERE table_schema = 'public' AND is_identity = 'YES'"
        " ORDER BY table_name").fetchall()
    return {f"{table}.{column}": str(seq) for table, column, seq in rows}


def _aligned(floor: int, index: int, count: int) -> int:
    """The smallest value at or above ``floor`` (and 1) that is ``≡ index (mod count)``."""
    value = max(floor, 1)
    return value + (index - value) % count


def _last_value(conn: psycopg.Connection, sequence: str) -> int:
    row = conn.execute(f"SELECT last_value FROM {sequence}").fetchone()  # our own catalogue's name
    return int(row[0]) if row else 0


def interleave(conn: psycopg.Connection, index: int, count: int) -> None:
    """Make this cluster hand out ids ``≡ index (mod count)`` from now on (run once, as the owner, before the
    cluster takes tenants; running it again with the same numbers changes nothing)."""
    if not 0 <= index < count:
        raise ValueError(f"cluster index {index} is not in 0..{count - 1}")
    with conn.transaction():
        for sequence in identity_sequences(conn).values():
            conn.execute(f"ALTER SEQUENCE {sequence} INCREMENT BY {int(count)} MINVALUE 1")
            conn.execute("SELECT setval(%s, %s, true)", (sequence, _aligned(_last_value(conn, sequence), index,
                                                                               count)))


def last_values(conn: psycopg.Connection) -> dict[str, int]:
    return {column: _last_value(conn, seq) for column, seq in identity_sequences(conn).items()}


def advance_past(conn: psycopg.Connection, floors: dict[str, int]) -> None:
    """Move each identity sequence of this cluster past ``floors`` (another cluster's ``last_values``), keeping
    its residue; never moves one back."""
    with conn.transaction():
        for column, sequence in identity_sequences(conn).items():
            row = conn.execute("SELECT seqincrement FROM pg_sequence WHERE seqrelid = %s::regclass",
                               (sequence,)).fetchone()
            step = int(row[0]) if row else 1
            current = _last_value(conn, sequence)
            wanted = floors.get(column, 0)
            if wanted > current:
                conn.execute("SELECT setval(%s, %s, true)", (sequence, _aligned(wanted, current % step, step)))
