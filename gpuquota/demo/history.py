"""Demo history: the last hours of telemetry of every demo GPU, back-filled at seed time.

Without it a newcomer's `make demo` shows 0 % everywhere: utilization is measured over
hours and months, and the live agents have only run for minutes. The history is made by
the real agent (`agent.runner.Agent` over the simulator, configured as `manage.py demo`
configures each node's agent) on a fake clock, spooled to a temporary folder, and stored
by the real ingestion service the way `import_batches` stores rescued spools; the usual
outbox then turns it into rollups.
"""

import logging
import math
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from django.db.models import Max

from agent.cli import read_boot_id
from agent.owners import OwnerResolver
from agent.runner import Agent, Clock
from agent.simulator import Simulator
from agent.spool import Spool
from gpuquota.demo.organisation import (
    DEMO_SEED,
    FAULTY_NODE,
    GPUS_PER_NODE,
    HEALTHY_PROFILES,
    TEAMS,
    DemoNode,
    demo_nodes,
    demo_unix_users,
)
from gpuquota.demo.usage import demo_usage_catch_up
from gpuquota.ingest.batches import batch_ingest
from gpuquota.ingest.models import Sample
from gpuquota.ingest.parsing import instant_parse
from gpuquota.ingest.protocol import batch_check, gzip_file_decode
from gpuquota.inventory.models import Gpu, Node

# The longest window the protocol takes (it divides 3600), polled ten times: an hour of the
# 96 demo GPUs is ~600 samples in 72 batches, and 96 GPU-hours for the rollups to compute.
HISTORY_WINDOW_S = 600
HISTORY_POLL_S = 60.0
# What `seed_demo` back-fills unless told otherwise. Each hour costs about 4 s on a small
# machine, nearly all of it in ingestion and the rollups: 8 h keeps seeding near 30 s.
DEFAULT_HISTORY_HOURS = 8
# The spool fsyncs every batch; in memory, where there is a tmpfs, that costs nothing.
SCRATCH_DIR = "/dev/shm" if Path("/dev/shm").is_dir() else None


@dataclass(frozen=True)
class HistoryRange:
    """What one node's history covers: [start_s, end_s) in epoch seconds."""

    start_s: int
    end_s: int


class FakeClock(Clock):
    """Time that passes only when the agent waits, and stops the agent at `stop_at_s`."""

    def __init__(self, *, start_s: float, stop_at_s: float) -> None:
        self.t, self.stop_at_s = start_s, stop_at_s

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        if self.t + seconds > self.stop_at_s:
            stop.set()  # the window ending at stop_at_s is closed; the next would be live
            return True
        self.t += max(0.0, seconds)
        return stop.is_set()


def demo_simulator(*, demo: DemoNode, clock: Clock, history_s: float) -> Simulator:
    """The simulator `manage.py demo` gives this node's agent, except that the faulty
    node's XID 79 GPU keeps working through the history (it is lost live, after start)."""
    faulty = demo.hostname == FAULTY_NODE
    return Simulator(
        GPUS_PER_NODE, seed=DEMO_SEED, hostname=demo.hostname, models=(demo.model_name,),
        profiles=() if faulty else tuple(HEALTHY_PROFILES.split(",")),
        users=tuple(demo_unix_users()), accounts=tuple(TEAMS),
        fail_after_s=history_s + HISTORY_WINDOW_S, clock=clock.now,
    )


def _history_range(*, node: Node, start_s: int, end_s: int) -> HistoryRange:
    """[start_s, end_s), starting after the node's latest stored sample: a second run (or
    one after the live demo) fills only the hours that have no data yet."""
    devices = Gpu.objects.filter(node=node).values("id")
    latest = Sample.objects.filter(gpu_id__in=devices).aggregate(end=Max("window_end"))["end"]
    if latest is not None:
        start_s = max(start_s, int(latest.timestamp()))
    return HistoryRange(start_s, end_s)


def _spool_history(*, demo: DemoNode, span: HistoryRange, directory: Path) -> list[Path]:
    """Run the node's agent over `span` on a fake clock; its spooled batches, oldest first."""
    clock = FakeClock(start_s=span.start_s, stop_at_s=span.end_s)
    spool = Spool(directory / "spool", clock=clock.now)
    agent = Agent(
        backend=demo_simulator(demo=demo, clock=clock, history_s=span.end_s - span.start_s),
        spool=spool, owners=OwnerResolver(str(directory / "proc")), hostname=demo.hostname,
        boot_id=read_boot_id("/proc"), window_s=HISTORY_WINDOW_S, poll_s=HISTORY_POLL_S,
        clock=clock,
    )
    agent.run(threading.Event())
    return spool.pending()


def _ingest(*, node: Node, paths: Iterable[Path]) -> int:
    """Store spooled batches as `import_batches` does (no age bound), each received when
    it was sent; the number of samples stored."""
    stored = 0
    for path in paths:
        body = batch_check(gzip_file_decode(path.read_bytes()))
        received_at = instant_parse(body["sent_at"]).astimezone(UTC).replace(microsecond=0)
        result = batch_ingest(node=node, body=body, now=received_at, check_age=False)
        stored += result.body["samples"]["stored"]
    return stored


@contextmanager
def _agent_logs_quiet() -> Iterator[None]:
    """The agent logs every window it closes at INFO; thousands of them say nothing here."""
    agent_log = logging.getLogger("agent")
    level = agent_log.level
    agent_log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        agent_log.setLevel(level)


def demo_history_backfill(*, hours: int, now: datetime,
                          hostnames: Iterable[str] | None = None) -> int:
    """Telemetry of the demo nodes (all, or `hostnames`) from `now - hours` to the last
    whole window before `now`, stored and rolled up; hours that already have samples are
    not made again. Returns the samples stored."""
    end_s = math.floor(now.timestamp()) // HISTORY_WINDOW_S * HISTORY_WINDOW_S
    start_s = math.floor(now.timestamp()) - hours * 3600
    wanted = None if hostnames is None else set(hostnames)
    stored = 0
    for demo in demo_nodes():
        if wanted is not None and demo.hostname not in wanted:
            continue
        node = Node.objects.get(cluster__slug=demo.cluster, hostname=demo.hostname)
        span = _history_range(node=node, start_s=start_s, end_s=end_s)
        if span.end_s - span.start_s < HISTORY_POLL_S:
            continue  # not one poll's worth of time without data
        with _agent_logs_quiet(), tempfile.TemporaryDirectory(
                prefix=f"gpuquota-history-{demo.hostname}-", dir=SCRATCH_DIR) as tmp:
            paths = _spool_history(demo=demo, span=span, directory=Path(tmp))
            stored += _ingest(node=node, paths=paths)
    demo_usage_catch_up()
    return stored
