"""One clock: the product reads the time only through `django.utils.timezone.now` (and what
calls it: `timezone.localtime()`, `localdate()`), the clock the tests move (tests/clock.py).
A second clock (`datetime.now()`, `utcnow()`, `date.today()`, `time.time()`, the database's
`Now()` or `now()` in SQL) reads the real time while the tests travel, and another instant
than the request's. Durations (`time.monotonic`, `perf_counter`) are no business time. The
agent (no Django: tests/house/test_layering.py) keeps its own `time.time`.

And the tests' clock itself: GPUQUOTA_TEST_NOW's travel, suspended around a `realtime` test,
and the stopped `clock` fixture."""

import ast
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.utils import timezone

from tests.clock import CALENDAR_INSTANTS, SuiteTravel, calendar_deselected, instant
from tests.house.test_layering import ROOT

PRODUCT = ("gpuquota", "accounts", "reports", "reclaim", "agent")
SECOND_CLOCKS = {
    ("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today"),
    ("time", "time"), ("time", "time_ns"),
}
# without their last argument (the instant), these read the clock
CLOCK_BY_DEFAULT = {("time", "localtime"): 1, ("time", "gmtime"): 1, ("time", "ctime"): 1,
                    ("time", "asctime"): 1, ("time", "strftime"): 2}
SQL_CLOCK = re.compile(r"(?<![.\w])(now\s*\(\s*\)|current_timestamp|current_date|"
                       r"localtimestamp|transaction_timestamp|statement_timestamp|"
                       r"clock_timestamp)", re.IGNORECASE)


def _names(tree: ast.AST) -> dict[str, tuple[str, ...]]:
    """What each imported name stands for: `dt` -> ("datetime",), `now` -> ("time", "time")."""
    names: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[(a.asname or a.name).split(".")[0]] = (a.name.split(".")[0],)
        elif isinstance(node, ast.ImportFrom) and node.module in ("datetime", "time"):
            for a in node.names:
                names[a.asname or a.name] = (node.module, a.name)
        elif isinstance(node, ast.ImportFrom) and node.module == "django.db.models.functions":
            for a in node.names:
                if a.name == "Now":
                    names[a.asname or a.name] = ("django", "Now")
    return names


def _dotted(node: ast.AST, names: dict) -> tuple[str, ...]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ()
    return names.get(node.id, (node.id,)) + tuple(reversed(parts))


def second_clocks(source: str) -> list[tuple[int, str]]:
    """(line, what) of each read of a clock other than `timezone.now` in `source`."""
    tree = ast.parse(source)
    names = _names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            path = _dotted(node.func, names)
            tail = path[-2:]
            if path[:1] == ("datetime",) and len(path) == 3:
                tail = path[1:]  # datetime.datetime.now, datetime.date.today
            if tail in SECOND_CLOCKS or len(node.args) < CLOCK_BY_DEFAULT.get(tail, 0):
                found.append((node.lineno, ".".join(tail) + "()"))
            elif path == ("django", "Now"):
                found.append((node.lineno, "Now() (the database's clock)"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if (match := SQL_CLOCK.search(node.value)) and _sql_like(node.value):
                found.append((node.lineno, f"{match.group(0)} in SQL"))
    return sorted(found)


def _sql_like(text: str) -> bool:
    return bool(re.search(r"\b(SELECT|INSERT|UPDATE|DELETE|WHERE|DEFAULT)\b", text))


def _django_free(path: Path) -> bool:
    return path.parts[len(ROOT.parts)] == "agent" and "django" not in path.read_text()


def test_the_product_reads_one_clock():
    offences = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            if _django_free(path):
                continue
            for line, what in second_clocks(path.read_text()):
                offences.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert offences == [], "read django.utils.timezone.now instead:\n" + "\n".join(offences)


def test_the_check_finds_each_second_clock():
    source = '''
import datetime as dt
import time
from datetime import UTC, date, datetime
from time import time as wall
from django.db.models.functions import Now
from django.utils import timezone

a = datetime.now(UTC)
b = datetime.utcnow()
c = date.today()
d = time.time()
e = wall()
f = dt.datetime.now()
g = dt.date.today()
h = Now()
i = "SELECT id FROM t WHERE at < now()"
j = time.localtime()
k = time.strftime("%H")
ok = (timezone.now(), timezone.localdate(), time.monotonic(), time.localtime(3),
      datetime.fromtimestamp(0, UTC), "call timezone.now() for it", time.strftime("%H", j))
'''
    assert [what for _, what in second_clocks(source)] == [
        "datetime.now()", "datetime.utcnow()", "date.today()", "time.time()", "time.time()",
        "datetime.now()", "date.today()", "Now() (the database's clock)", "now() in SQL",
        "time.localtime()", "time.strftime()"]


def test_the_suite_travels_and_a_realtime_test_does_not():
    start = instant("2091-02-28T12:00:00+01:00")
    assert start == datetime(2091, 2, 28, 11, tzinfo=UTC)
    assert set(map(instant, CALENDAR_INSTANTS)) == set(map(instant, CALENDAR_INSTANTS.values()))
    travel = SuiteTravel(start)
    travel.start()
    try:
        assert timedelta(0) <= timezone.now() - start < timedelta(seconds=5)  # it ticks
        travel.suspend()
        assert abs(timezone.now() - start) > timedelta(days=365)  # the suite's own now
        travel.resume()
        assert timedelta(0) <= timezone.now() - start < timedelta(seconds=5)
    finally:
        travel.stop()


def test_the_clock_fixture_stands_still(clock):
    before = timezone.now()
    assert before == clock.now and before.microsecond == 0
    assert timezone.now() == before
    assert clock.shift(timedelta(seconds=95)) - before == timedelta(seconds=95)
    assert clock.move_to("leap-day") == datetime(2028, 2, 29, 12, tzinfo=UTC)


def test_a_calendar_run_leaves_out_a_test_at_the_instants_it_does_not_name(monkeypatch):
    class Item:
        def __init__(self, *instants):
            self.mark = pytest.mark.calendar(*instants).mark

        def get_closest_marker(self, name):
            return self.mark if name == "calendar" else None

    every, new_year = Item(), Item("new-year", "leap-day")
    calendar_run = SimpleNamespace(option=SimpleNamespace(markexpr="calendar"))
    monkeypatch.setenv("GPUQUOTA_TEST_NOW", "monday-0030")
    assert calendar_deselected(calendar_run, [every, new_year]) == [new_year]
    monkeypatch.setenv("GPUQUOTA_TEST_NOW", "leap-day")
    assert calendar_deselected(calendar_run, [every, new_year]) == []
    monkeypatch.setenv("GPUQUOTA_TEST_NOW", "monday-0030")  # the whole suite at an instant
    assert calendar_deselected(SimpleNamespace(option=SimpleNamespace(markexpr="")),
                               [every, new_year]) == []
