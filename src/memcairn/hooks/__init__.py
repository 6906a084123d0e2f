"""Agent hooks: standard library only (a hook is a new process for every agent event)."""
