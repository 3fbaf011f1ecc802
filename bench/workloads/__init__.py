"""Workloads for the lending simulation (`bench.lending`): what a site's fleet, its
reservations and its owners' work look like, so a site can run its own mix.

A workload is a function called as `function(*, days=..., seed=...)` that returns a
`Workload`; name it on the command line as `--workload package.module:function`. Everything
it returns is deterministic in the seed; times are seconds from the simulation's start
(00:00 UTC on a Monday) or from a reservation's start, on the one-minute grid (a time not on
it is rounded down to the minute):

- `nodes` x `gpus_per_node` GPUs of one class, and `teams` reserving teams (0 .. teams-1);
- `reservations`: each booked through the product's reservation service at the start (the
  service picks the GPUs), with `runs[k]` the owner's activity on its k-th GPU: `Run`s,
  seconds from the reservation's start, each with its GPU utilization (percent), memory held
  and whether a process of the reserving team is there (a job, a notebook kernel, a service);
  a reservation with `lendable=False` is one whose lead turned lending off;
- `failures`: a node's GPUs (or the k-th GPU of a reservation) failing (an XID 79 sent
  through ingestion, nothing reported until `end_s`, then a good sample after a reboot);
- `backlog`: the standing queue of preemptible borrower work (jobs of `job_hours`, each
  checkpointing every `checkpoint_s`; on preemption the work since the last checkpoint is
  lost; a job stops `stop_s` after SIGTERM, or is killed at `kill_after_s` when it ignores
  it, a `hang_share` of jobs).

Shipped: `bench.workloads.today:workload` (the reclaim simulation's), `bench.workloads.
failures:workload` (the failure modes of issue 19), `bench.workloads.traces:workload` (from
published cluster traces), `bench.workloads.tiny:workload` (the tests').
"""

from dataclasses import dataclass, field

MINUTE, HOUR, DAY = 60, 3600, 86400


@dataclass(frozen=True)
class Run:
    """The owner's activity on one GPU over [start_s, end_s) of its reservation."""

    start_s: int
    end_s: int
    util: float
    memory_gib: float = 30.0
    process: bool = True


@dataclass
class ReservationPlan:
    team: int
    count: int
    start_h: int
    hours: int
    kind: str
    runs: list[list[Run]] = field(default_factory=list)
    lendable: bool = True


def runs_clip(runs: list[Run], end_s: int) -> list[Run]:
    """The runs cut at `end_s` (a reservation's length), those starting after it dropped."""
    return [Run(r.start_s, min(r.end_s, end_s), r.util, r.memory_gib, r.process)
            for r in runs if r.start_s < end_s]


@dataclass(frozen=True)
class Failure:
    """GPUs failing over [start_s, end_s) of the simulation: every GPU of `node`, or the
    `gpu`-th GPU of reservation number `reservation` (its index in `reservations`)."""

    start_s: int
    end_s: int
    node: int | None = None
    reservation: int | None = None
    gpu: int = 0


@dataclass(frozen=True)
class Backlog:
    job_hours: tuple[float, float] = (2.0, 12.0)
    checkpoint_s: tuple[int, ...] = (600, 900, 1800)
    stop_s: tuple[int, int] = (5, 30)
    kill_after_s: int = 120
    hang_share: float = 0.02
    util: float = 90.0


@dataclass
class Workload:
    name: str
    nodes: int
    gpus_per_node: int
    teams: int
    reservations: list[ReservationPlan]
    failures: list[Failure] = field(default_factory=list)
    backlog: Backlog = field(default_factory=Backlog)
