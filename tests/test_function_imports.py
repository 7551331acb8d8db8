"""An import inside a function is a smell: it usually hides a cycle, and the fix
is in the layering. A production file imports at its top, except where an import
must wait, and each such place is named here with why:

- an app's ``AppConfig.ready()``: Django loads models only after every app's
  ``apps.py`` was read, so the receivers, slots and checks an app plugs in that
  load a model are imported there (Django's documented place for them), and
  only those;
- a dependency that is slow to import or optional, imported only by the code
  that uses it (:data:`WAITING`).

A new function-level import fails this test; so does a name here that no longer
holds one, so the list stays the list of what the code does."""

from __future__ import annotations

import ast
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from tests.test_module_cycles import ROOT, production_files

#: (file, function): the modules it imports and why they must wait.
WAITING: dict[tuple[str, str], tuple[set[str], str]] = {
    ("engine/model_client.py", "__init__"): (
        {"openai", "openai.types.chat"},
        "openai takes about 1.4 s to import; every Django process imports this "
        "module, only one that builds a client pays",
    ),
    ("registry/adapters/mcp.py", "_open_client"): (
        {"mcp", "mcp.client.stdio", "mcp.client.streamable_http"},
        "the mcp SDK takes about 1.9 s to import; only a process that talks MCP "
        "loads it",
    ),
    ("localmodel/server.py", "main"): (
        {
            "uvicorn",
            "llama_cpp.server",
            "llama_cpp.server.settings",
            "localmodel",
            "localmodel.prompt_cache",
        },
        "llama-cpp-python[server] is optional (make model installs it): without it "
        "the server refuses to start with a hint; the handler and the prompt cache "
        "import llama_cpp themselves",
    ),
    ("manage.py", "main"): (
        {"django.core.management"},
        "Django's own manage.py: a missing Django is reported with a hint",
    ),
}


def function_imports() -> dict[tuple[str, str], set[str]]:
    """(file, innermost function) -> the modules imported inside it."""
    found: dict[tuple[str, str], set[str]] = {}

    def visit(node: ast.AST, path: str, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = child.name
            elif function and isinstance(child, ast.Import | ast.ImportFrom):
                names = (
                    {a.name for a in child.names}
                    if isinstance(child, ast.Import)
                    else {"." * child.level + (child.module or "")}
                )
                found.setdefault((path, function), set()).update(names)
            visit(child, path, inner)

    for _, file, _ in production_files():
        path = file.relative_to(ROOT).as_posix()
        visit(ast.parse(file.read_text(encoding="utf-8"), path), path, None)
    return found


def in_ready(place: tuple[str, str]) -> bool:
    path, function = place
    return path.endswith("/apps.py") and function == "ready"


def test_every_function_level_import_is_one_that_must_wait() -> None:
    found = {
        place: names
        for place, names in function_imports().items()
        if not in_ready(place)
    }
    unexplained = {}
    for place, names in found.items():
        waiting = WAITING.get(place, (set(), ""))[0]
        if names - waiting:
            unexplained[place] = sorted(names - waiting)
    assert not unexplained, (
        f"imports inside functions: {unexplained}; import at the top of the file, "
        "or fix the layering that stops it"
    )
    stale = {
        place
        for place, (names, _) in WAITING.items()
        if names - found.get(place, set())
    }
    assert not stale, f"named as waiting but imported at the top now: {sorted(stale)}"


def test_ready_is_the_only_place_apps_import_late() -> None:
    """The rule above sees apps' ``ready()``: an import there is found (the
    walk is not blind to them), and each one is in an ``apps.py``."""
    ready = [place for place in function_imports() if place[1] == "ready"]
    assert ready, "no AppConfig.ready() import found: the walk is broken"
    assert all(in_ready(place) for place in ready), ready


def ready_imports() -> list[str]:
    """Every import statement in an app's ``ready()``, as written."""
    found = []
    for _, file, _ in production_files():
        if file.name != "apps.py":
            continue
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name == "ready":
                found += [
                    ast.unparse(child)
                    for child in ast.walk(node)
                    if isinstance(child, ast.Import | ast.ImportFrom)
                ]
    return sorted(set(found))


def _needs_the_registry(statement: str) -> tuple[str, bool]:
    """Whether running the import ``statement`` in a fresh interpreter, with
    settings configured and the app registry not yet ready (as Django reads
    each app's ``apps.py``), raises ``AppRegistryNotReady``."""
    code = (
        "import os, sys\n"
        "os.environ['DJANGO_SETTINGS_MODULE'] = 'reach_site.settings'\n"
        "from django.core.exceptions import AppRegistryNotReady\n"
        "try:\n"
        f"    {statement}\n"
        "except AppRegistryNotReady:\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=120
    )
    assert done.returncode in (0, 3), (statement, done.stderr.decode()[-2000:])
    return statement, done.returncode == 3


def test_ready_imports_only_what_loads_models() -> None:
    """An import in ``ready()`` is one that could not sit at the top of
    ``apps.py``: it loads a model. One that loads none (a port's declarations,
    a link builder) is imported at the top, and fails here otherwise. Each is
    tried in its own interpreter, a few at once."""
    statements = ready_imports()
    assert statements, "no AppConfig.ready() import found: the walk is broken"
    with ThreadPoolExecutor(max_workers=4) as pool:
        needs = dict(pool.map(_needs_the_registry, statements))
    needless = sorted(statement for statement, needed in needs.items() if not needed)
    assert not needless, (
        f"in ready() but loading no model: {needless}; import at the top of apps.py"
    )
