"""Entry point of ``memcairn hook <event>`` (filled in by the agent-integration work)."""

from __future__ import annotations

import json
import sys


def run_hook(args: list[str]) -> int:
    # Fail open: whatever happens, the agent gets one JSON object and exit 0.
    sys.stdout.write(json.dumps({}) + "\n")
    return 0
