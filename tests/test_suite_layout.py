"""The test suite's own shape: what tests share lives in conftest.py or in helper modules that are no test
modules, so a test module never imports another (importing one also runs its module-level fixtures and marks),
and a helper is written once."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path) -> set[str]:
    """Every module an ``import`` or ``from … import`` names, at any depth of the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def suite_files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    importing = {str(p.relative_to(TESTS)): sorted(m for m in imported_modules(p)
                                                   if m.split(".")[0].startswith("test_"))
                 for p in suite_files(TESTS)}
    assert {name: found for name, found in importing.items() if found} == {}


def test_free_port_is_written_once() -> None:
    defining = [str(p.relative_to(TESTS)) for p in suite_files(TESTS)
                if any(isinstance(n, ast.FunctionDef) and n.name.lstrip("_") == "free_port"
                       for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))))]
    assert defining == ["processes.py"]
