"""Migration 15: whether a team memory still holds (``core/fields.py``'s ``correction``, ``core/corrections.py``).

Set by ``POST /v1/memories/{id}/correction`` only (``pgstore/corrections.py``): superseded by another memory of the
tenant, wrong or a reverted fix, with who said so and when, and the corrections taken back before, so a corrected
memory is kept, readable by id, as its own audit trail. The constant default fills the rows stored before without
rewriting the table; row-level security is unchanged (a column of a tenant table the application role updates).
"""

from __future__ import annotations

M015 = """
ALTER TABLE items ADD COLUMN correction jsonb NOT NULL DEFAULT '{}'::jsonb;
"""
