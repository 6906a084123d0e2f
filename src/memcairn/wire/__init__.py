"""What hooks, worker and doors agree on and how they reach each other: settings, the protocol, fast JSON,
the spool, the fence, privacy, the worker and team-server clients. Standard library only (the hooks import it),
and this ``__init__`` imports nothing."""
