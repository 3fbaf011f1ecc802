"""The tests' one clock (time-machine), loaded by tests/conftest.py.

- The product reads the time only through `django.utils.timezone.now` (tests/house/test_clock.py);
  time-machine moves every Python clock of the test process (`time.time`, `datetime.now`,
  `timezone.now`, ... in every thread, the live server's too), never `time.monotonic`,
  `time.sleep` nor another process's clock.
- `GPUQUOTA_TEST_NOW=<ISO instant>` runs the whole suite at that instant: one travel started
  before any fixture, with tick=True (time goes on from there). Tests marked `realtime` run
  at the real time (the travel is suspended around them, fixtures included): those whose
  other processes read the clock too (a Celery worker, the dev Slurm cluster, Prometheus, a
  browser, certificates checked by OpenSSL...); the markers of `REALTIME_MARKERS` imply it.
- The `clock` fixture stops the clock for a test at the suite's now (or an instant of its
  choice) to the whole second: history built "from now" and the page that reads it see the
  same instant however slow the machine (`clock.now`, `clock.move_to(...)`, `clock.shift(...)`).
- The `calendar` marker names the date-sensitive tests that CI runs again at the instants
  of `CALENDAR_INSTANTS` (`.ci/run`, docs/development.md#time-in-the-tests).
"""

import os
from datetime import UTC, datetime, timedelta

import time_machine

ENV = "GPUQUOTA_TEST_NOW"
# Tests with these markers drive a process whose clock time-machine cannot move.
REALTIME_MARKERS = ("realtime", "browser", "redis", "slurm", "prometheus", "kubernetes")
# And these modules, without such a marker: they start the agent, the demo, a mail sender,
# real services to break, or give slapd certificates that OpenSSL checks at the real time.
REALTIME_MODULES = (
    "tests/agent/test_cli.py", "tests/agent/test_crash.py", "tests/demo/test_live.py",
    "tests/demo/test_make.py", "tests/faults/", "tests/mail/test_crash.py",
    "tests/sso/test_ldap_tls.py",
)
# Where CI reruns the `calendar` tests (.ci/run): the edges of days, weeks, months and years,
# a leap day, and the night Europe moves its clocks (01:00 UTC on the last Sunday of March).
CALENDAR_INSTANTS = {
    "monday-0030": "2027-01-04T00:30:00Z",
    "sunday-2359": "2027-01-03T23:59:00Z",
    "month-first-second": "2027-02-01T00:00:00Z",
    "month-last-second": "2027-02-28T23:59:59Z",
    "new-year": "2028-01-01T00:00:00Z",
    "leap-day": "2028-02-29T12:00:00Z",
    "europe-summer-time": "2027-03-28T01:30:00Z",
}


def instant(text: str) -> datetime:
    """An ISO 8601 instant (`Z` or an offset; a name of CALENDAR_INSTANTS too) in UTC."""
    text = CALENDAR_INSTANTS.get(text, text)
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"{ENV}={text!r}: give the instant's offset (Z for UTC)")
    return value.astimezone(UTC)


class SuiteTravel:
    """The suite-wide travel of GPUQUOTA_TEST_NOW, suspended around `realtime` tests: it goes
    on afterwards from where it was, plus the real time the suspended test took."""

    def __init__(self, destination: datetime):
        self.destination = destination
        self._travel: time_machine.travel | None = None
        self._suspended_at: tuple[datetime, datetime] | None = None

    def start(self) -> None:
        self._travel = time_machine.travel(self.destination, tick=True)
        self._travel.start()

    def stop(self) -> None:
        if self._travel is not None:
            self._travel.stop()
            self._travel = None

    def suspend(self) -> None:
        if self._travel is None:
            return
        travelled = datetime.now(UTC)
        self.stop()
        self._suspended_at = (travelled, datetime.now(UTC))

    def resume(self) -> None:
        if self._suspended_at is None:
            return
        travelled, real = self._suspended_at
        self._suspended_at = None
        self.destination = travelled + (datetime.now(UTC) - real)
        self.start()


def suite_travel() -> SuiteTravel | None:
    """The travel GPUQUOTA_TEST_NOW asks for (not started), or None."""
    text = os.environ.get(ENV, "").strip()
    return SuiteTravel(instant(text)) if text else None


def calendar_deselected(config, items) -> list:
    """In a calendar run (`-m calendar` at a named instant of CALENDAR_INSTANTS), the tests
    whose `calendar` marker names other instants only (`@pytest.mark.calendar("new-year")`:
    a slow test that only a month's edge can break)."""
    at = os.environ.get(ENV, "").strip()
    if at not in CALENDAR_INSTANTS or config.option.markexpr != "calendar":
        return []
    return [item for item in items if (marker := item.get_closest_marker("calendar"))
            and marker.args and at not in marker.args]


def is_realtime(item) -> bool:
    path = item.nodeid.split("::")[0]
    return (any(item.get_closest_marker(name) for name in REALTIME_MARKERS)
            or path.startswith(REALTIME_MODULES))


class Clock:
    """A stopped clock (time-machine, tick=False): `now` is what `timezone.now()` answers."""

    def __init__(self, at: datetime):
        self._travel = time_machine.travel(at, tick=False)
        self._traveller = self._travel.start()

    @property
    def now(self) -> datetime:
        return datetime.now(UTC)

    def move_to(self, at: datetime | str) -> datetime:
        self._traveller.move_to(instant(at) if isinstance(at, str) else at, tick=False)
        return self.now

    def shift(self, delta: timedelta | float) -> datetime:
        self._traveller.shift(delta)
        return self.now

    def stop(self) -> None:
        self._travel.stop()


def stopped_now() -> datetime:
    """The suite's now (GPUQUOTA_TEST_NOW's travel or the real time), to the second."""
    return datetime.now(UTC).replace(microsecond=0)
