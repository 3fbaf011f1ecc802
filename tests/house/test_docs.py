"""The docs stay true: the README and every page of docs/ link only to what exists in a
clone (files, and headings for #anchors), each page is reachable from the README, the
files they name exist, the layout table of development.md has a row for every installed
app, and the configuration reference lists every environment variable the code reads."""

import ast
import re
from functools import cache
from pathlib import Path

import gpuquota
from tests.house import project_app_configs

ROOT = Path(gpuquota.__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"\[(?:[^\]\n]|\n(?!\n))*\]\(([^()\s]+)\)")
CODE_PATH = re.compile(r"`((?:gpuquota|accounts|reports|reclaim|agent|tests|bench|deploy|templates|"
                       r"static|docs)/[\w./-]*)`")
# Code that reads the environment; the settings of tests and benches are documented too,
# but not required.
CODE_PACKAGES = ("gpuquota", "accounts", "reports", "reclaim", "agent")
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE"}


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def _anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in _prose(path.read_text()).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            slug, n = _slug(match[1]), 0
            while (slug if n == 0 else f"{slug}-{n}") in found:
                n += 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def _links(path: Path) -> list[str]:
    return LINK.findall(INLINE_CODE.sub("``", _prose(path.read_text())))


def _resolve(page: Path, target: str) -> tuple[Path, str]:
    file, _, anchor = target.partition("#")
    return ((page.parent / file).resolve() if file else page), anchor


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        for target in _links(page):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, anchor = _resolve(page, target)
            if not path.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_nothing_points_outside_the_clone():
    outside = [f"{page.name}: {target}" for page in PAGES for target in _links(page)
               if not re.match(r"[a-z]+:", target)
               and not _resolve(page, target)[0].is_relative_to(ROOT)]
    mentions = [page.name for page in PAGES if "shared/spec" in page.read_text()]
    assert outside == [] and mentions == []


def test_every_page_of_docs_is_reachable_from_the_readme():
    seen, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen or page.suffix != ".md" or not page.exists():
            continue
        seen.add(page)
        todo.extend(_resolve(page, t)[0] for t in _links(page) if not re.match(r"[a-z]+:", t))
    assert sorted(p.name for p in DOCS.glob("*.md") if p.resolve() not in seen) == []


def test_the_files_the_docs_name_exist():
    missing = sorted({f"{page.name}: {path}" for page in PAGES
                      for path in CODE_PATH.findall(_prose(page.read_text()))
                      if not (ROOT / path).exists()})
    assert missing == []


def _names_read(path: Path) -> set[str]:
    """Environment variables the module reads by name: `os.environ.get("X")`,
    `os.environ["X"]`, and helpers whose name says env (`env_int("X", ...)`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        name = None
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            on_environ = isinstance(func, ast.Attribute) and ast.unparse(func.value).endswith(
                "environ") and called in ("get", "pop")
            if on_environ or "env" in called.lower() or called == "_value":
                name = node.args[0].value
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ") \
                and isinstance(node.slice, ast.Constant):
            name = node.slice.value
        if isinstance(name, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", name):
            found.add(name)
    return found - NOT_SETTINGS


def test_the_configuration_reference_lists_every_environment_variable():
    read = {name for package in CODE_PACKAGES for path in (ROOT / package).rglob("*.py")
            if "migrations" not in path.parts for name in _names_read(path)}
    assert {"DATABASE_URL", "RECLAIM_RULE", "INGEST_MAX_SAMPLES", "LOGIN_FAILURE_LIMIT"} <= read
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", (DOCS / "configuration.md").read_text()))
    assert sorted(read - documented) == []


def test_the_layout_table_has_a_row_for_every_installed_app():
    text = (DOCS / "development.md").read_text()
    table = text[text.index("## Layout"):text.index("## How the code is written")]
    rows = set(re.findall(r"^\| `([\w/]+/)` \|", table, re.M))
    folders = {f"{Path(config.path).resolve().relative_to(ROOT).as_posix()}/"
               for config in project_app_configs()}
    assert sorted(folders - rows) == []
