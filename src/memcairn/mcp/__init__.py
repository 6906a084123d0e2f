"""The MCP door: the stdio server (``server``) and its hand-written JSON-RPC wire (``protocol``)."""
