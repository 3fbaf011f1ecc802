"""The demo is a room of its own: core is the ground floor every app stands on, so it
imports none of them, and no app imports the demo."""

import ast
from pathlib import Path

import gpuquota

ROOT = Path(gpuquota.__file__).resolve().parent.parent
APPS = ("accounts", "reports", "agent", "gpuquota.inventory", "gpuquota.reservations",
        "gpuquota.ingest", "gpuquota.usage", "gpuquota.demo")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def _modules(folder: str):
    return [p for p in (ROOT / folder).rglob("*.py") if "migrations" not in p.parts]


def _reaches(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_core_imports_no_other_app():
    offenders = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in _modules("gpuquota/core")
        for module in _imports(path)
        if any(_reaches(module, app) for app in APPS)
    }
    assert offenders == set()


def test_no_app_imports_the_demo():
    offenders = {
        f"{path.relative_to(ROOT)}: {module}"
        for folder in ("accounts", "reports", "agent", "gpuquota")
        for path in _modules(folder)
        if "demo" not in path.relative_to(ROOT).parts
        for module in _imports(path)
        if _reaches(module, "gpuquota.demo")
    }
    assert offenders == set()


def test_core_holds_no_demo_module():
    assert not [p.name for p in (ROOT / "gpuquota/core").rglob("*demo*")]
