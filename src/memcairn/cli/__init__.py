"""The command line. This ``__init__`` imports nothing: ``memcairn.cli.entry`` dispatches hooks and the MCP server
before click (``app``) is imported."""
