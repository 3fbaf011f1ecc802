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
