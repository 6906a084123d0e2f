"""The worker's routes, one module per concept; each parses the request, calls one use case and renders the
answer. ``worker/app.py`` puts them in its table."""
