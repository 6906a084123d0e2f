"""Registering memcairn with coding agents: ``memcairn install|uninstall claude-code|codex|gemini``.

See ``core`` for where each agent's files are and how they are changed, ``specs`` for the hooks and
commands, ``jsonedit`` and ``tomlblock`` for the editing that leaves the user's entries alone.
"""

from memcairn.install.core import PLATFORMS, Change, Report, install, targets, uninstall
from memcairn.install.specs import AGENTS, memcairn_executable

__all__ = ["AGENTS", "PLATFORMS", "Change", "Report", "install", "memcairn_executable", "targets", "uninstall"]
