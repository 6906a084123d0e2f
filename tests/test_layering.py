"""The layering rules of docs/ARCHITECTURE.md, read from the source: every ``import`` of a memcairn module (also
those inside functions) goes down the module table, never up.

- a module imports only modules of its own layer or of the layers above it in the table (lower in the stack);
- no layer below the doors imports ``memcairn.hooks`` (the hooks' helpers live below them);
- the doors reach the worker through ``lifecycle`` and ``client`` only: no door imports ``memcairn.worker``,
  except ``memcairn worker run``, which is the worker (``worker.daemon``);
- ``protocol`` (what hooks and worker agree on) imports nothing of memcairn.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# The module table of docs/ARCHITECTURE.md, top (base) to bottom (doors): (layer, module prefixes).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("memcairn.__version__", "memcairn.settings_source", "memcairn.config",
              "memcairn.errors", "memcairn.models", "memcairn.serde", "memcairn.project", "memcairn.json_depth",
              "memcairn.fastjson", "memcairn.background",
              "memcairn.protocol", "memcairn.spool", "memcairn.fence", "memcairn.confusables", "memcairn.tokens")),
    ("store", ("memcairn.store",)),
    ("mirror", ("memcairn.vectors", "memcairn.mirror")),
    ("search", ("memcairn.search",)),
    ("capture", ("memcairn.capture",)),
    ("transfer", ("memcairn.transfer",)),
    ("team store", ("memcairn.pgstore",)),
    ("composition", ("memcairn.runtime", "memcairn.context", "memcairn.context_memo", "memcairn.doctor")),
    ("reach", ("memcairn.client", "memcairn.lifecycle", "memcairn.team_client")),
    ("worker", ("memcairn.worker",)),
    ("server", ("memcairn.server",)),
    ("measurement", ("memcairn.bench",)),
    ("doors", ("memcairn.cli", "memcairn.entry", "memcairn.__main__", "memcairn.hooks", "memcairn.mcp_server",
               "memcairn.mcp_protocol", "memcairn.install")),
]
# Known crossings, each with its reason; a new one must be argued here (and in the architecture page).
ALLOWED = {
    ("memcairn.search.telemetry", "memcairn.bench.timing"),  # the one percentile helper, shared with the benches
    ("memcairn.cli.worker_cmds", "memcairn.worker.daemon"),  # `memcairn worker run` is the worker itself
}
DOORS = ("memcairn.cli", "memcairn.entry", "memcairn.__main__", "memcairn.hooks", "memcairn.mcp_server",
         "memcairn.mcp_protocol", "memcairn.install")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_of(module: str) -> int:
    if module == "memcairn":  # the package itself: its version only
        return 0
    found = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
             if _within(module, prefix)]
    if not found:
        raise AssertionError(f"{module} is in no layer of the module table: add it to docs/ARCHITECTURE.md")
    return max(found)[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def imports() -> list[tuple[str, str]]:
    """(importer, imported) for every memcairn import in src/, at any depth of the file."""
    edges = []
    for path in sorted((SRC / "memcairn").rglob("*.py")):
        source = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "memcairn":
                    edges += [(source, f"memcairn.{alias.name}") for alias in node.names]
                elif _within(node.module, "memcairn"):
                    edges.append((source, node.module))
            elif isinstance(node, ast.Import):
                edges += [(source, alias.name) for alias in node.names if _within(alias.name, "memcairn")]
    return edges


EDGES = imports()


def test_the_reader_sees_the_imports_it_checks() -> None:
    """The rules below are only as good as the import list: it holds the lazy imports inside functions too."""
    assert ("memcairn.hooks.events", "memcairn.lifecycle") in EDGES  # the autostart's, inside a function
    assert ("memcairn.client", "memcairn.lifecycle") in EDGES
    assert len(EDGES) > 200


def test_every_module_is_in_a_layer() -> None:
    for path in (SRC / "memcairn").rglob("*.py"):
        layer_of(module_name(path))


@pytest.mark.parametrize("layer", [name for name, _ in LAYERS])
def test_imports_go_down_the_module_table(layer: str) -> None:
    index = [name for name, _ in LAYERS].index(layer)
    upward = sorted({(a, b) for a, b in EDGES if layer_of(a) == index and layer_of(b) > index} - ALLOWED)
    assert upward == [], f"{layer} imports from a layer below it in docs/ARCHITECTURE.md"


def test_no_lower_layer_imports_the_hooks() -> None:
    doors = [name for name, _ in LAYERS].index("doors")
    below = sorted({(a, b) for a, b in EDGES if _within(b, "memcairn.hooks") and layer_of(a) < doors})
    assert below == []


def test_the_doors_reach_the_worker_through_lifecycle_and_client() -> None:
    into_worker = sorted({(a, b) for a, b in EDGES if any(_within(a, d) for d in DOORS)
                          and _within(b, "memcairn.worker")} - ALLOWED)
    assert into_worker == []


def test_the_protocol_imports_nothing_of_memcairn() -> None:
    assert [b for a, b in EDGES if a == "memcairn.protocol"] == []


def test_the_rules_fail_on_a_crossing() -> None:
    """The checks above are not vacuous: an import of the hooks from the store, or of the worker from the MCP
    server, is a crossing each would report."""
    assert layer_of("memcairn.hooks.events") > layer_of("memcairn.capture.transcripts")
    assert layer_of("memcairn.worker.daemon") > layer_of("memcairn.lifecycle")
    assert layer_of("memcairn.store.items") < layer_of("memcairn.search.service")
