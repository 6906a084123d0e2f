"""The fast lane (``pytest -m "not slow"``) depends on the ``slow`` marker being registered in pyproject.toml:
with ``--strict-markers`` an unregistered one stops collection, and a misspelt one would silently select nothing."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Markers pytest and its plugins (pytest-timeout, anyio) register themselves.
BUILTIN = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings", "timeout", "anyio"}


def registered() -> set[str]:
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    return {line.split(":", 1)[0].split("(", 1)[0].strip() for line in options.get("markers", [])}


def test_the_slow_marker_is_registered_and_every_marker_the_tests_use_is_known() -> None:
    assert "slow" in registered()
    used = set()
    for path in (REPO / "tests").rglob("*.py"):
        if path.name == Path(__file__).name:
            continue
        used |= set(re.findall(r"pytest\.mark\.([A-Za-z_]\w*)", path.read_text(encoding="utf-8")))
    assert used - BUILTIN - registered() == set()
    assert "slow" in used  # the fast lane leaves something out


def test_pytest_itself_knows_the_slow_marker() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "--markers", "-p", "no:cacheprovider"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "@pytest.mark.slow:" in done.stdout
