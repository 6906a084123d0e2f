"""Ways a memcairn database gets damaged, reproduced on a real file: the reliability campaign (``memcairn bench
faults``) and the tests use them. Each works on a file no process writes to at that moment, or through SQLite
itself (as a stray tool or a bad disk would)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from memcairn.store import schema
from memcairn.store.db import run_script


def _connect(db_path: Path | str) -> sqlite3.Connection:
    return sqlite3.connect(str(db_path), isolation_level=None, timeout=30)


def damage_keyword_index(db_path: Path | str, *, every_block: bool = False) -> None:
    """Overwrite bytes of the keyword index's largest block, or with ``every_block`` of every block of its
    postings (not its averages record, id 1, nor its structure record, id 10): row counts stay equal, a query
    that reads a damaged block fails with "database disk image is malformed"."""
    conn = _connect(db_path)
    try:
        sql = ("SELECT id, block FROM memory_items_fts_data WHERE id NOT IN (1, 10)" if every_block else
               "SELECT id, block FROM memory_items_fts_data ORDER BY length(block) DESC LIMIT 1")
        for block_id, block in conn.execute(sql).fetchall():
            garbled = bytearray(block)
            for at in range(4, len(garbled), 7):
                garbled[at] = 0xFF
            conn.execute("UPDATE memory_items_fts_data SET block = ? WHERE id = ?", (bytes(garbled), block_id))
    finally:
        conn.close()


def drift_content(db_path: Path | str, item_id: int, text: str) -> None:
    """Change an item's text with the index's update trigger off (as a tool editing the file would): the
    index keeps the old words, the counts stay equal."""
    conn = _connect(db_path)
    try:
        conn.execute("DROP TRIGGER IF EXISTS memory_items_au")
        conn.execute("UPDATE memory_items SET text = ? WHERE id = ?", (text, item_id))
        run_script(conn, schema.FTS_TRIGGERS)
    finally:
        conn.close()


def drop_keyword_table(db_path: Path | str) -> None:
    conn = _connect(db_path)
    try:
        conn.execute("DROP TABLE memory_items_fts")
    finally:
        conn.close()


def corrupt_page(db_path: Path | str, table: str = "memory_items") -> int:
    """Overwrite the header of the first leaf page of ``table`` in the file (after a checkpoint moved every
    page there): SQLite's check fails and reads of that page fail, while an insert (at the table's other end)
    would still go through. Returns the page number."""
    conn = _connect(db_path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        row = conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno LIMIT 1",
                           (table,)).fetchone()
        if row is None:
            raise ValueError(f"{table} has no leaf page of its own: add more rows first")
    finally:
        conn.close()
    page = int(row[0])
    with open(db_path, "r+b") as fh:
        fh.seek((page - 1) * page_size)
        fh.write(b"\xff" * 12)  # page type, free block, cell count, content start, fragments
    return page
