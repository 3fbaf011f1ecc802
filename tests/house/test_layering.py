"""The layering of the code (docs/development.md, "Layering"), read from the import
statements of every module, those inside functions included:

- nothing under `gpuquota/` (the domain apps) nor `accounts/` imports the apps built on
  them (`reports`, `reclaim`): those contribute sections, collectors and demo seeds
  through `gpuquota.core.contributions` instead;
- tasks call services, never the reverse: only a `tasks` module imports a `tasks` module;
- no two modules of the project import each other, directly or through others;
- the agent imports no Django, and nothing of the server.
"""

import ast
from functools import cache
from pathlib import Path

from django.apps import apps

import gpuquota

ROOT = Path(gpuquota.__file__).resolve().parent.parent
UPPER = ("reports", "reclaim")
LOWER = ("gpuquota", "accounts")
SERVER_SIDE = ("django", "rest_framework", "drf_spectacular", "celery", "kombu", "redis",
               "psycopg", "gpuquota", "accounts", *UPPER)


def _packages() -> list[str]:
    """The top-level packages of this checkout: every installed app's, and the agent."""
    names = {config.name.split(".")[0] for config in apps.get_app_configs()
             if Path(config.path).resolve().is_relative_to(ROOT)}
    return sorted(names | {"agent"})


@cache
def _modules() -> dict[str, Path]:
    found = {}
    for package in _packages():
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(name: str, path: Path) -> set[str]:
    """The absolute names of what the module imports (a name imported from a package
    as `package.name`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _label(name: str) -> str:
    return str(_modules()[name].relative_to(ROOT))


@cache
def _graph() -> dict[str, set[str]]:
    """Module -> the project's modules it imports (a name resolved to its module)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imported(name, path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def test_domain_apps_never_import_the_apps_built_on_them():
    found = {(_label(name), target) for name, targets in _graph().items()
             if any(_within(name, lower) for lower in LOWER)
             for target in targets if any(_within(target, upper) for upper in UPPER)}
    assert found == set()


def test_only_tasks_import_tasks():
    found = {f"{_label(name)} imports {target}" for name, targets in _graph().items()
             if name.rpartition(".")[2] != "tasks"
             for target in targets if target.rpartition(".")[2] == "tasks"}
    assert found == set(), "enqueue by name: gpuquota.core.dispatch.task_enqueue_on_commit"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
    return cycles


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_cycle_finder_finds_a_circle_through_a_function_level_import():
    graph = {"a.services": {"a.sending"}, "a.sending": {"a.tasks"},
             "a.tasks": {"a.sending"}, "b": {"a.services"}}
    assert _cycles(graph) == [["a.sending", "a.tasks"]]


def test_the_agent_imports_nothing_of_the_server():
    found = {f"{_label(name)} imports {imported}"
             for name, path in _modules().items() if _within(name, "agent")
             for imported in _imported(name, path)
             if any(_within(imported, server) for server in SERVER_SIDE)}
    assert found == set()
