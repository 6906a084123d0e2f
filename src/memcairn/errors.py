"""Exceptions raised by memcairn.

    MemcairnError
     ├── ConfigError                 a setting has a value we cannot use
     ├── ValidationError             caller input is malformed (bad kind, facts not a list, too large, ...)
     ├── NotFoundError               an id or project that does not exist
     ├── StoreError                  the SQLite file cannot be opened, written or migrated
     │    └── SchemaTooNewError      the database was written by a newer memcairn
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


class VectorIndexUnavailableError(MemcairnError):
    pass


class EmbeddingError(MemcairnError):
    pass


class WorkerUnavailableError(MemcairnError):
    pass


class WorkerError(MemcairnError):
    """The worker answered, with a server error: a defect to report, not a worker to start again (a retry
    could repeat a write that went through)."""
