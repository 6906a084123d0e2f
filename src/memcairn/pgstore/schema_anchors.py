"""Migration 14: what a memory rests on travels with its row (``core/fields.py``'s ``anchors``).

The server keeps a memory's anchors as they were captured (files with their content ids, identifiers, commit and
branch) and never judges them: it has no working directory. A developer's worker reads them back and checks them
against the project's files on its own machine (``worker/remote_reads.py``). The constant default fills the rows
stored before without rewriting the table; row-level security is unchanged (a column of a tenant table).
"""

from __future__ import annotations

M014 = """
ALTER TABLE items ADD COLUMN anchors jsonb NOT NULL DEFAULT '{}'::jsonb;
"""
