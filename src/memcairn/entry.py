"""The name agents installed by an earlier memcairn still run: their MCP server command is
``<python> -I -c "from memcairn.entry import mcp; mcp()"``. Kept so that upgrading memcairn does not break a
configured agent; ``memcairn install`` writes the current name (``memcairn.cli.entry``)."""

from memcairn.cli.entry import main, mcp

__all__ = ["main", "mcp"]
