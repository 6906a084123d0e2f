"""The worker: the one long-lived process that owns the store, the vector mirror and the embedding model.

``app.py`` builds the HTTP API, ``daemon.py`` runs it in the foreground. Starting, stopping and finding a
worker from another process is ``memcairn.lifecycle``'s.
"""
