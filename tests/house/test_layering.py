"""The layering of the code (docs/development.md, "Layering"), read from the import
statements of every module, those inside functions included:

- every installed app of the project stands on a floor, declared once, in the picture of
  the floors in docs/development.md; no module imports an app on its own floor or a higher
  one (the composition root, `gpuquota/*.py`, is no app: it names them all);
- tasks call services, never the reverse: only a `tasks` module imports a `tasks` module;
- no two modules of the project import each other, directly or through others;
- the agent imports no Django, and nothing of the server.
"""

import ast
import re
from functools import cache
from pathlib import Path

import gpuquota
from tests.house import project_app_configs

ROOT = Path(gpuquota.__file__).resolve().parent.parent
DOC = ROOT / "docs" / "development.md"
FLOORS_MARK = "<!-- floors:"
SERVER_SIDE = ("django", "rest_framework", "drf_spectacular", "celery", "kombu", "redis",
               "psycopg", "gpuquota", "accounts", "reports", "reclaim")
_APP_NAME = re.compile(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*")


def floors_parse(text: str) -> list[list[str]]:
    """The floors of the picture after the floors mark in `text`, highest first: the app
    names starting each line of its fenced block (several, comma-separated, share one)."""
    block = text[text.index(FLOORS_MARK):].split("```")[1]
    floors = []
    for line in block.splitlines()[1:]:  # the fence's own line names its language
        names = re.match(r"\s*([\w.]+(?:\s*,\s*[\w.]+)*)", line)
        if names:
            floors.append([name.strip() for name in names.group(1).split(",")])
    return floors


@cache
def _floor_of() -> dict[str, int]:
    """App name -> its floor (0: the lowest), from docs/development.md."""
    floors = floors_parse(DOC.read_text())
    return {app: len(floors) - 1 - level for level, names in enumerate(floors)
            for app in names}


def _installed() -> list[str]:
    """The project's installed apps (those whose code is in this checkout)."""
    return [config.name for config in project_app_configs()]


def _packages() -> list[str]:
    """The top-level packages of this checkout: every installed app's, and the agent."""
    names = {config.name.split(".")[0] for config in project_app_configs()}
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


def app_of(module: str, app_names) -> str | None:
    """The app a module belongs to: the longest app name it lies within (None: the
    composition root, the agent)."""
    within = [app for app in app_names if _within(module, app)]
    return max(within, key=len) if within else None


def upward_imports(graph: dict[str, set[str]], floor_of: dict[str, int]) -> set[str]:
    """Every import of a module into another app on the same floor or a higher one."""
    found = set()
    for name, targets in graph.items():
        app = app_of(name, floor_of)
        if app is None:
            continue
        for target in targets:
            other = app_of(target, floor_of)
            if other is not None and other != app and floor_of[other] >= floor_of[app]:
                found.add(f"{name} ({app}, floor {floor_of[app]}) imports {target} "
                          f"({other}, floor {floor_of[other]})")
    return found


def test_every_installed_app_has_one_floor():
    declared = [app for names in floors_parse(DOC.read_text()) for app in names]
    assert [app for app in declared if not _APP_NAME.fullmatch(app)] == []
    assert sorted({app for app in declared if declared.count(app) > 1}) == []
    missing = sorted(set(_installed()) - set(declared))
    assert missing == [], "add a line for each to the floors in docs/development.md"
    assert sorted(set(declared) - set(_installed())) == [], "a floor names no installed app"


def test_no_app_imports_its_own_floor_or_a_higher_one():
    assert upward_imports(_graph(), _floor_of()) == set()


def test_the_floor_checker_finds_an_upward_import_at_any_depth():
    floor_of = {"low": 0, "mid": 1, "mid.sub": 2, "high": 3, "twin": 3}
    graph = {"low.services": {"low.models", "mid.selectors"},  # function level or not
             "mid.selectors": {"low.models"}, "mid.sub.views": {"mid.selectors"},
             "mid.api": {"mid.sub.views"}, "high.views": {"mid.sub.views", "twin.models"},
             "twin.models": set(), "gpuquota.urls": {"high.views"}}
    assert upward_imports(graph, floor_of) == {
        "low.services (low, floor 0) imports mid.selectors (mid, floor 1)",
        "mid.api (mid, floor 1) imports mid.sub.views (mid.sub, floor 2)",
        "high.views (high, floor 3) imports twin.models (twin, floor 3)",
    }


def test_the_floors_read_from_the_picture():
    text = "intro\n" + FLOORS_MARK + " x -->\n```text\nhigh   \u25b2 top\n" \
        "a.b, c  \u2502 a shared floor\n\n\u2534 a footnote line\nlow\n```\nafter ```x```"
    assert floors_parse(text) == [["high"], ["a.b", "c"], ["low"]]


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
