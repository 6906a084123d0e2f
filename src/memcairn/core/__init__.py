"""The base: records and their field table, identity, errors, tokens, small helpers. Standard library only, no I/O;
imports nothing else of memcairn."""
