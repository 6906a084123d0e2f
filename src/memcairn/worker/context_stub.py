"""The SessionStart context for ``GET /api/context/inject``: delegates to ``memcairn.context``.

Kept so the route's import stays put; the renderer, its format and its budget rules live in
``memcairn.context``.
"""

from __future__ import annotations

from memcairn.context import render_context

__all__ = ["render_context"]
