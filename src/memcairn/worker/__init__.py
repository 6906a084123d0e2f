"""The worker: the one long-lived process that owns the store, the vector mirror and the embedding model.

``app.py`` puts the HTTP API together from ``routes/`` (the use cases: ``intake.py``, ``resume.py``; the shared
state: ``state.py``), ``daemon.py`` runs it in the foreground. Starting, stopping and finding a worker from
another process is ``memcairn.wire.lifecycle``'s.
"""
