"""Test configuration shared by every area.

Tests marked `postgres`, `redis` or `browser` need the real service and are
skipped, with the reason, when it is not there; CI sets GPUQUOTA_FAIL_ON_SKIP=1
so that a skip there fails the run. The clock (GPUQUOTA_TEST_NOW, the `clock` fixture, the
`realtime` and `calendar` markers) is tests/clock.py's.
"""

import os
import shutil
import socket
from urllib.parse import urlparse

import pytest

from tests import clock as _clock

# Playwright's sync API runs an event loop in the test thread; Django's ORM is
# called from the same thread between page actions, which is safe here.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
_SUITE_TRAVEL = pytest.StashKey()
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def _redis_reachable() -> bool:
    url = os.environ.get("REDIS_URL")
    if not url:
        return False
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname, parsed.port or 6379), timeout=2):
            return True
    except OSError:
        return False


def _browser_available() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return shutil.which(CHROMIUM) is not None


def pytest_configure(config):
    travel = _clock.suite_travel()  # GPUQUOTA_TEST_NOW: before any fixture
    if travel is not None:
        travel.start()
        config.stash[_SUITE_TRAVEL] = travel


def pytest_unconfigure(config):
    if (travel := config.stash.get(_SUITE_TRAVEL, None)) is not None:
        travel.stop()


def pytest_report_header(config):
    if (travel := config.stash.get(_SUITE_TRAVEL, None)) is not None:
        return f"{_clock.ENV}: the suite runs from {travel.destination.isoformat()}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A `realtime` test (tests/clock.py) runs, fixtures included, at the real time."""
    travel = item.config.stash.get(_SUITE_TRAVEL, None)
    if travel is None or not _clock.is_realtime(item):
        return (yield)
    travel.suspend()
    try:
        return (yield)
    finally:
        travel.resume()


@pytest.fixture
def clock():
    """The clock stopped at the suite's now, to the second (tests/clock.py's `Clock`)."""
    stopped = _clock.Clock(_clock.stopped_now())
    yield stopped
    stopped.stop()


def pytest_collection_modifyitems(config, items):
    if deselected := _clock.calendar_deselected(config, items):
        config.hook.pytest_deselected(items=deselected)
        dropped = set(deselected)
        items[:] = [item for item in items if item not in dropped]
    on_postgres = os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
    needs = {
        "postgres": (on_postgres, "needs PostgreSQL: set DATABASE_URL=postgres://..."),
        "redis": (_redis_reachable(), "needs a reachable Redis: set REDIS_URL=redis://..."),
        "browser": (_browser_available(), f"needs {CHROMIUM} and the playwright package"),
        # telemetry: Debian's prometheus and promtool (apt-get install prometheus)
        "prometheus": (bool(shutil.which("prometheus") and shutil.which("promtool")),
                       "needs Debian's prometheus and promtool: apt-get install prometheus"),
    }
    for item in items:
        for marker, (available, reason) in needs.items():
            if marker in item.keywords and not available:
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("GPUQUOTA_FAIL_ON_SKIP") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reporter.write_line(f"GPUQUOTA_FAIL_ON_SKIP: {len(skipped)} test(s) skipped", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def roles(db):
    """The role matrix: admin, lead of `team`, lead of another team, member of
    `team`, and an outsider with no team."""
    from tests.factories import RoleMatrix

    return RoleMatrix.create()


@pytest.fixture(scope="session")
def _chromium():
    """One Debian chromium for the session (each test gets its own context: cookies,
    storage and pages are not shared)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browser_page(_chromium, live_server):
    """A Playwright page in Debian's chromium, with `base_url` set to the live server."""
    context = _chromium.new_context(
        base_url=live_server.url, viewport={"width": 1366, "height": 900}
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(autouse=True, scope="session")
def _celery_tasks_in_process():
    """Tasks queued by the code under test (`mail.send` after a commit) run in the test's
    process, as on the embedded default, even with REDIS_URL set: nothing is left on the
    broker for no one. Tests of real workers start their own (tests/usage/test_e2e.py)."""
    from gpuquota.celery import app

    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous


@pytest.fixture(autouse=True)
def _celery_app_stays_current():
    """A test that makes another Celery app current (`Celery(...)` does by default) would
    send every later test's tasks (`shared_task`s resolve the current app) through it:
    they would then go to its broker instead of running here. Fail that test, not them."""
    from celery import current_app

    from gpuquota.celery import app

    yield
    assert current_app._get_current_object() is app, "a test left another Celery app current"


@pytest.fixture(autouse=True)
def _tasks_after_response_done():
    """Tasks a request queued for after its response (`gpuquota.core.dispatch`) have run
    before the test's database is rolled back or flushed."""
    yield
    from gpuquota.core.dispatch import tasks_after_response_wait

    assert tasks_after_response_wait(timeout_s=120), "a task queued by a request still runs"


@pytest.fixture(autouse=True)
def _celery_joins_allowed():
    """Celery marks "inside a task" with a process-wide flag that every eager `delay()`
    sets and restores. Two threads doing so at once (the live server's request thread and
    the test's) can leave it set, and every later `.get()` in that process then refuses
    ("Never call result.get() within a task!"). No test starts inside a task."""
    from celery.result import _set_task_join_will_block

    _set_task_join_will_block(False)
    yield


@pytest.fixture
def smtp_server(settings):
    """A real SMTP server (aiosmtpd) on 127.0.0.1 at a free port, with Django's SMTP backend
    pointed at it and mail switched on. Yields a `tests.smtp.SmtpServer`:
    `.messages` (each a `Received`: `.to`, `.rcpt_tos`, `.message` (an EmailMessage),
    `.text()`, `.html()`, `.attachments()` -> {filename: (content type, bytes)}),
    `.to(address)` the messages delivered to one address, `.recipients()` every envelope
    recipient once per message, `.stop()`/`.start()` to take the server down and up again
    (senders get connection refused meanwhile), `.refused` addresses answered with 550.
    Messages are captured before the server answers 250, so they are there as soon as
    `mail_send` returns."""
    import logging

    from tests.smtp import SmtpServer

    logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd's per-command log
    server = SmtpServer()
    server.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_TIMEOUT = 10
    settings.MAIL_ENABLED = True
    try:
        yield server
    finally:
        from gpuquota.core.dispatch import tasks_after_response_wait

        server.hang.clear()
        server.holding = False
        tasks_after_response_wait(timeout_s=120)  # the mail a request left for later
        server.stop()


@pytest.fixture(scope="session")
def live_server(live_server, django_db_blocker):
    """pytest-django's live server, whose request threads' database sessions are
    ended with it, so that the test database can be dropped at the end."""
    yield live_server
    from django.db import connection

    if connection.vendor == "postgresql":
        live_server.stop()  # stopping again afterwards is harmless on PostgreSQL
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


@pytest.fixture(scope="module")
def smtp():
    """A loopback SMTP server for a module's real Celery worker (`worker`)."""
    import logging

    from tests.smtp import SmtpServer

    logging.getLogger("mail.log").setLevel(logging.WARNING)
    server = SmtpServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def worker(request, django_db_setup, django_db_blocker, smtp, tmp_path_factory):
    """A real Celery worker (no beat: the test gives every instant) on this suite's Redis
    and test database, mailing through `smtp`; a module's `WORKER_ENV` adds settings."""
    from gpuquota.celery import app
    from tests.helpers import celery_worker, suite_database_url

    with django_db_blocker.unblock():
        url = suite_database_url()
    assert "/test_" in url
    app.control.purge()
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {**os.environ, "DATABASE_URL": url, "EMAIL_URL": f"smtp://127.0.0.1:{smtp.port}",
           "GPUQUOTA_MAIL_ENABLED": "1", **getattr(request.module, "WORKER_ENV", {})}
    with celery_worker(env=env, log_path=log_path) as proc:
        yield proc


@pytest.fixture
def tasks_to_the_worker():
    """Tasks go through Redis to the worker, not in-process as in the other tests."""
    from gpuquota.celery import app

    previous = app.conf.task_always_eager
    app.conf.task_always_eager = False
    yield
    app.conf.task_always_eager = previous
