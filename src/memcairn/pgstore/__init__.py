"""The team store on PostgreSQL with pgvector: schema and migrations, tenant-scoped items and search, API keys
and the audit log, and the bundled PostgreSQL used by ``memcairn server --embedded`` and the tests.

The SQLite store never imports this package."""
