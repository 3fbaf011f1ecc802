"""Helpers shared by the test areas: browser sessions, racing threads, Celery workers."""

import csv
import io
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connections


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def csv_lines(text: str) -> list[str]:
    """Each row of a CSV file, parsed and joined again with bare commas: compares with
    expected lines whatever the quoting (the product quotes every cell)."""
    return [",".join(row) for row in csv.reader(io.StringIO(text, newline=""))]


def run_concurrently(jobs: list[Callable]) -> list:
    """Run the callables at the same instant, each in its own thread with its own
    database connection; each job's result, or the exception it raised, in order."""
    barrier = threading.Barrier(len(jobs))
    outcomes: list = [None] * len(jobs)

    def run(index: int, job: Callable) -> None:
        try:
            barrier.wait()
            outcomes[index] = job()
        except Exception as exc:  # noqa: BLE001 - handed to the test to judge
            outcomes[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=item) for item in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return outcomes


def browser_login(page, username: str, password: str = "password") -> None:
    """Log in through the real login form."""
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")


def role_client(world, role: str):
    """A test client logged in as `world`'s user of that role (`anonymous`: none)."""
    from django.test import Client

    client = Client()
    if role != "anonymous":
        client.force_login(getattr(world, role))
    return client


def assert_api_error(response, status: int, field: str | None = None) -> None:
    """The API's one error format, with this status, naming `field` first if given."""
    assert response.status_code == status, response.content[:400]
    body = response.json()
    assert set(body) == {"code", "detail", "errors"}
    if field is not None:
        assert body["errors"][0]["field"] == field, body


def suite_database_url() -> str:
    """The URL of the test database this process uses, for the processes a test starts."""
    db = connections["default"].settings_dict
    return (f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
            f"/{db['NAME']}")


def screenshot(page, name: str) -> None:
    """Keep a screenshot in test-artifacts/ for a human to look at."""
    os.makedirs("test-artifacts", exist_ok=True)
    # A long page (ReDoc's) on a loaded 2-core machine takes more than the page's default.
    page.screenshot(path=f"test-artifacts/{name}.png", full_page=True, timeout=60_000)


@contextmanager
def project_process(module_argv: list[str], *, env: dict, log_path: Path
                    ) -> Iterator[subprocess.Popen]:
    """`python -m <module_argv>` (this interpreter) in the project's folder with `env`,
    logging to `log_path`; stopped on exit (terminate, then kill), the tail of its log
    printed for a failing test's report. It leads a process group of its own (its pid),
    which `os.killpg` kills whole, children and all."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", *module_argv], cwd=settings.BASE_DIR,
                                env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            print(log_path.read_text()[-3000:])


@contextmanager
def celery_worker(*, env: dict, log_path: Path,
                  options: tuple[str, ...] = ("--concurrency", "1", "--without-gossip",
                                              "--without-mingle"),
                  ) -> Iterator[subprocess.Popen]:
    """A real Celery worker process of this project (`options`: one process by default)
    with `env` (see `project_process`)."""
    with project_process(["celery", "-A", "gpuquota", "worker", "--loglevel", "INFO",
                          *options], env=env, log_path=log_path) as proc:
        yield proc
