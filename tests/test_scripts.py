"""The shell scripts of the quick start: what they do before they touch the system."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_system_packages_are_skipped_on_request_and_the_script_says_so() -> None:
    env = {**os.environ, "MEMCAIRN_SKIP_SYSTEM_DEPS": "1", "PATH": "/nonexistent"}  # no apt-get reachable anyway
    done = subprocess.run(["/bin/bash", str(REPO / "scripts" / "install-system-deps")], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0
    assert "skipped (MEMCAIRN_SKIP_SYSTEM_DEPS=1)" in done.stderr and "browser tests will be skipped" in done.stderr


def test_the_install_notice_names_the_packages_and_the_reason_before_apt_runs() -> None:
    script = (REPO / "scripts" / "install-system-deps").read_text()
    notice, apt = script.index("drive a real Chromium"), script.index("apt-get update -qq")
    assert notice < apt and "MEMCAIRN_SKIP_SYSTEM_DEPS=1 to skip" in script
