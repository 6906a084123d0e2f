"""The SQLite store: the only source of truth."""

from memcairn.store.items import Store

__all__ = ["Store"]
