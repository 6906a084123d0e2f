"""``memcairn server``: the team memory's /v1 HTTP API over the PostgreSQL team store (``memcairn.pgstore``)."""
