"""No two production modules import each other.

The graph is read from the source, not from ``sys.modules``: every ``import x.y``
and ``from x.y import z`` of every production file (the top-level packages but
``tests`` and ``bench``, migrations left out), at module level or inside a
function or an ``if TYPE_CHECKING:`` block alike. ``from package import module``
is an edge to that module; any other name imported from a module is an edge to
the module itself. Only modules of this project count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_PRODUCTION = {"tests", "bench"}


def production_files() -> Iterator[tuple[str, Path, bool]]:
    """(module name, path, is a package's ``__init__``) of each production file."""
    for path in sorted(ROOT.glob("*.py")):
        yield path.stem, path, False
    for package in sorted(ROOT.iterdir()):
        if not (package / "__init__.py").is_file() or package.name in NOT_PRODUCTION:
            continue
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:
                continue
            if parts[-1] == "__init__":
                yield ".".join(parts[:-1]), path, True
            else:
                yield ".".join(parts), path, False


def import_graph() -> dict[str, set[str]]:
    """Each production module and the production modules it imports."""
    files = list(production_files())
    modules = {name for name, _, _ in files}
    graph: dict[str, set[str]] = {}
    for name, path, is_package in files:
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name.split(".") if is_package else name.split(".")[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    base = ".".join([*package, *([base] if base else [])])
                for alias in node.names:
                    submodule = f"{base}.{alias.name}" if base else alias.name
                    if submodule in modules:
                        imported.add(submodule)
                    elif base in modules:
                        imported.add(base)
        imported.discard(name)
        graph[name] = imported
    return graph


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_the_graph_is_read_from_every_kind_of_import():
    graph = import_graph()
    assert len(graph) > 100
    # `from runs import tasks as celery_tasks`: the module, through its package.
    assert "runs.tasks" in graph["runs.services"]
    # `from runs.models import Task`: the module the names come from.
    assert "runs.models" in graph["runs.services"]


def test_no_two_production_modules_import_each_other():
    graph = import_graph()
    pairs = sorted(
        f"{a} <-> {b}" for a in graph for b in graph[a] if a < b and a in graph[b]
    )
    assert pairs == []


def test_no_production_modules_import_each_other_through_others():
    assert cycles_of(import_graph()) == []
