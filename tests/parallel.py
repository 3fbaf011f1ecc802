"""Loaded with `-p tests.parallel` (pyproject's addopts), before Django reads its settings.

Under pytest-xdist (`make test` runs two workers) each worker gets its own Redis database,
the one after REDIS_URL's for gw0, the next for gw1, ..., so that the tests that purge,
flush or count the Celery queue (real workers, the queue-depth metric) never see another
worker's tasks. Each worker's PostgreSQL test database is already its own
(pytest-django suffixes it with the worker id).
"""

import os
from urllib.parse import urlparse, urlunparse


def worker_redis_url(url: str, worker: str) -> str:
    """`url` moved to the database numbered after its own by the worker's index (gwN)."""
    parsed = urlparse(url)
    base = int(parsed.path.strip("/") or 0)
    return urlunparse(parsed._replace(path=f"/{base + 1 + int(worker.removeprefix('gw'))}"))


_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker and os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = worker_redis_url(os.environ["REDIS_URL"], _worker)

# The dev Slurm cluster's ports (tests/schedulers/slurm_cluster.py): the live Slurm tests
# are in more than one file, so two workers may each start one; gwN's are 7*N further.
if _worker and _worker != "gw0":
    _base = int(os.environ.get("GQ_SLURM_PORT_BASE", "17817"))
    os.environ["GQ_SLURM_PORT_BASE"] = str(_base + 7 * int(_worker.removeprefix("gw")))

# Scheduling (`--dist loadfile`, as `make test` runs): a file at a time per worker, as
# xdist does, but the files start longest first (tests/durations.json: seconds per file in a
# full run; an unlisted file counts UNLISTED_S a test), so a minutes-long file never starts
# last while the other workers have nothing left to do. (xdist orders files by their number
# of tests: the live Slurm files, few tests of minutes each, started last.) The live Slurm
# files stay units of their own: run one after another on one dev cluster, an earlier file's
# jobs reached the later file's accounting reads.
DURATIONS = os.path.join(os.path.dirname(__file__), "durations.json")
UNLISTED_S = 0.3


def work_unit(nodeid: str) -> str:
    """The unit a test is scheduled in: its file."""
    return nodeid.split("::", 1)[0]


def units_longest_first(nodeids_by_unit: dict[str, dict], seconds: dict[str, float]) -> list:
    """The units (files) in the order to start them: longest expected first."""
    def expected(unit: str) -> float:
        paths = {nodeid.split("::", 1)[0] for nodeid in nodeids_by_unit[unit]}
        unlisted = sum(1 for nodeid in nodeids_by_unit[unit]
                       if nodeid.split("::", 1)[0] not in seconds)
        return sum(seconds.get(path, 0.0) for path in paths) + UNLISTED_S * unlisted
    return sorted(nodeids_by_unit, key=lambda unit: -expected(unit))


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    import json
    from collections import OrderedDict

    from xdist.scheduler import LoadFileScheduling

    with open(DURATIONS) as handle:
        seconds = json.load(handle)

    class LongestFirst(LoadFileScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the queue is complete at the first assignment
                self.workqueue = OrderedDict(
                    (unit, self.workqueue[unit])
                    for unit in units_longest_first(self.workqueue, seconds))
                self.ordered = True
            super()._assign_work_unit(node)

    return LongestFirst(config, log)
