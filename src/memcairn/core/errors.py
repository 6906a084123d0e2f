"""Exceptions raised by memcairn.

    MemcairnError
     ├── ConfigError                 a setting has a value we cannot use
     ├── ValidationError             caller input is malformed (bad kind, facts not a list, too large, ...)
     ├── NotFoundError               an id or project that does not exist
     ├── StoreError                  the SQLite file cannot be opened, written or migrated
     │    ├── SchemaTooNewError      the database was written by a newer memcairn
     │    ├── StoreDamagedError      the file fails SQLite's check: writes are refused until it is restored
     │    ├── KeywordIndexDamagedError  the FTS5 index is damaged or missing (rebuilt from the rows)
     │    └── DiskFullError          a write found no space left on the disk
     ├── VectorIndexUnavailableError the vector mirror cannot be reached or read
     ├── EmbeddingError              the embedding model could not be loaded or run
     └── WorkerUnavailableError      no worker answered on the loopback port

Every message names what failed and what to do about it; the CLI prints it as one line.
"""

from __future__ import annotations


class MemcairnError(Exception):
    """Root of every error memcairn raises on purpose."""


class ConfigError(MemcairnError):
    pass


class ValidationError(MemcairnError):
    pass


class NotFoundError(MemcairnError):
    pass


class StoreError(MemcairnError):
    pass


class SchemaTooNewError(StoreError):
    pass


class StoreDamagedError(StoreError):
    """The database file failed SQLite's check: a write could spread the damage, so writes are refused."""


class KeywordIndexDamagedError(StoreError):
    """The keyword index cannot be read (damaged or dropped); the rows are intact and it can be rebuilt."""


class DiskFullError(StoreError):
    """A write found the disk full; nothing of it was stored."""


class VectorIndexUnavailableError(MemcairnError):
    pass


class EmbeddingError(MemcairnError):
    pass


class WorkerUnavailableError(MemcairnError):
    pass


class WorkerError(MemcairnError):
    """The worker answered, with a server error: a defect to report, not a worker to start again (a retry
    could repeat a write that went through)."""


class WouldWait(Exception):  # noqa: N818 (not an error: a signal to run the call again where it may wait)
    """A step of a read would wait (for a connection, a lock, a project read whole, a query's embedding) where
    waiting is not allowed (``pgstore/waits.py``); the caller runs the whole read again where it is. Not a
    ``MemcairnError``: nothing failed, and no handler of errors may turn it into an answer."""
