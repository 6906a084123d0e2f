"""The worker: the one long-lived process that owns the store, the vector mirror and the embedding model.

``app.py`` builds the HTTP API, ``daemon.py`` runs, starts and stops it. Importing this package (or
``daemon``) imports nothing heavy: ``memcairn.client`` reaches the lifecycle code from hooks.
"""
