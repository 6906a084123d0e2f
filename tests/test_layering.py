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
    ("core", ("memcairn.__version__", "memcairn.core")),
    ("wire", ("memcairn.wire",)),
    ("store", ("memcairn.store",)),
    ("mirror", ("memcairn.vectors", "memcairn.mirror")),
    ("team store", ("memcairn.pgstore",)),
    ("search", ("memcairn.search",)),
    ("capture", ("memcairn.capture", "memcairn.transfer")),
    ("context", ("memcairn.context",)),
    ("processes", ("memcairn.worker", "memcairn.server")),
    ("doors", ("memcairn.cli", "memcairn.__main__", "memcairn.entry", "memcairn.hooks", "memcairn.mcp",
               "memcairn.install")),
    ("measurement", ("memcairn.bench",)),
]
# Known crossings, each with its reason; a new one must be argued here (and in the architecture page).
ALLOWED = {
    ("memcairn.cli.worker_cmds", "memcairn.worker.daemon"),  # `memcairn worker run` is the worker itself
}
DOORS = ("memcairn.cli", "memcairn.__main__", "memcairn.entry", "memcairn.hooks", "memcairn.mcp", "memcairn.install")


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
    assert ("memcairn.hooks.session_start", "memcairn.wire.lifecycle") in EDGES  # the autostart's, inside a function
    assert ("memcairn.wire.client", "memcairn.wire.lifecycle") in EDGES
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
    assert [b for a, b in EDGES if a == "memcairn.wire.protocol"] == []


def test_the_rules_fail_on_a_crossing() -> None:
    """The checks above are not vacuous: an import of the hooks from the store, or of the worker from the MCP
    server, is a crossing each would report."""
    assert layer_of("memcairn.hooks.events") > layer_of("memcairn.transfer.transcripts")
    assert layer_of("memcairn.worker.daemon") > layer_of("memcairn.wire.lifecycle")
    assert layer_of("memcairn.store.items") < layer_of("memcairn.search.service")


# The storage boundary (store/protocols.py): these see a store only through its protocols and plain records.
THROUGH_PROTOCOLS = ("memcairn.search", "memcairn.context", "memcairn.capture")
STORE_FACES = ("memcairn.store.protocols", "memcairn.store.records")


def _through_protocols(module: str) -> bool:
    return any(_within(module, prefix) for prefix in THROUGH_PROTOCOLS)


def test_search_context_and_capture_import_only_the_store_protocols_and_records() -> None:
    concrete = sorted({(a, b) for a, b in EDGES if _through_protocols(a) and _within(b, "memcairn.store")
                       and b not in STORE_FACES})
    assert concrete == [], "import the store's protocols (store.protocols) or plain records (store.records) instead"


def test_search_context_and_capture_reach_into_no_store_internals() -> None:
    """No ``store._conn`` or other private member of a store object (the SQL belongs to the store)."""
    reached = []
    for path in sorted((SRC / "memcairn").rglob("*.py")):
        module = module_name(path)
        if not _through_protocols(module):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and ast.unparse(node.value).split(".")[-1] in ("store", "_store")):
                reached.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    assert reached == []


def _runtime_imports(path: Path) -> set[str]:
    """memcairn modules ``path`` imports outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) == "TYPE_CHECKING" for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and _within(node.module, "memcairn"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if _within(a.name, "memcairn")}
    return found


def test_the_store_protocols_and_records_hold_no_sqlite() -> None:
    """What the boundary's callers import must not pull the SQLite store in with it."""
    for name in STORE_FACES:
        path = SRC / (name.replace(".", "/") + ".py")
        imported = _runtime_imports(path)
        assert all(layer_of(m) < layer_of("memcairn.store") or m in STORE_FACES for m in imported), (name, imported)
        assert "sqlite3" not in path.read_text(encoding="utf-8"), name


def test_the_boundary_rules_fail_on_a_crossing() -> None:
    assert _through_protocols("memcairn.search.service") and _through_protocols("memcairn.capture.pipeline")
    assert _through_protocols("memcairn.context.build") and not _through_protocols("memcairn.worker.app")
    assert "memcairn.store.items" not in STORE_FACES and "memcairn.store.fts" not in STORE_FACES


def package_of(module: str) -> str:
    """``memcairn.<package>``; a module at the package root is a package of its own."""
    return ".".join(module.split(".")[:2])


def _modules() -> set[str]:
    return {module_name(path) for path in (SRC / "memcairn").rglob("*.py")}


def cycles_across_packages(edges: list[tuple[str, str]], modules: set[str]) -> list[tuple[str, str]]:
    """The edges a -> b between two packages from which an import path leads back to a."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:  # ``from memcairn.x import name`` names memcairn.x.name: the module is memcairn.x
        graph.setdefault(a, set()).add(b if b in modules else b.rsplit(".", 1)[0])

    def reaches(start: str, goal: str) -> bool:
        seen, todo = {start}, [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    return sorted({(a, b) for a, targets in graph.items() for b in targets
                   if package_of(a) != package_of(b) and reaches(b, a)})


def test_no_import_cycle_crosses_packages() -> None:
    assert cycles_across_packages(EDGES, _modules()) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    edges = [("memcairn.wire.client", "memcairn.cli.entry"), ("memcairn.cli.entry", "memcairn.cli.app"),
             ("memcairn.cli.app", "memcairn.wire.client"), ("memcairn.cli.app", "memcairn.core.errors")]
    modules = {"memcairn.wire.client", "memcairn.cli.entry", "memcairn.cli.app", "memcairn.core.errors"}
    assert cycles_across_packages(edges, modules) == [("memcairn.cli.app", "memcairn.wire.client"),
                                                     ("memcairn.wire.client", "memcairn.cli.entry")]


def test_the_package_root_holds_only_the_package_python_m_and_the_installed_entry() -> None:
    """``entry.py`` is the name agents configured by an earlier memcairn run (``install/specs.py``)."""
    assert sorted(p.name for p in (SRC / "memcairn").glob("*.py")) == ["__init__.py", "__main__.py", "entry.py"]


def test_nothing_imports_the_benches() -> None:
    """``memcairn bench`` reaches them through the ``memcairn.commands`` entry points (pyproject.toml)."""
    assert sorted({(a, b) for a, b in EDGES if _within(b, "memcairn.bench") and not _within(a, "memcairn.bench")}) == []
