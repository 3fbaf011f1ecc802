"""The reliability benchmark's default generator: a fleet of 2,048 GPUs (256 nodes of 8)
over 180 days, in the interface `bench.reliability` runs (`workload(days, seed)`).

Base rates of hardware failures per GPU-day, from the published studies: Meta's research
clusters (arXiv 2410.21680) see a 1,024-GPU job's mean time to failure near 8 hours,
about 3 failures per 1,000 GPU-days; the 1,056-GPU study (arXiv 2503.11901) finds H100
memory errors 3.2x as frequent per GPU as A100's. So: A100 2, H100 4, L40S 1 per 1,000
GPU-days. Planted on top:

- GPU lemons at 10x, 20x and 40x their class's rate (8 of each), from day 0;
- node lemons: 4 nodes whose every GPU fails at 5x (a bad board or power supply);
- a lemon's hardware warnings at its multiple too (the part that fails also warns: the
  XID counts of Meta's lemon detection; the same multiple is this generator's
  assumption), drawn from a stream of their own so a seed's failures stay as they were;
- the H100 class's rate doubles at day `DRIFT_DAY`;
- application XIDs (13, 31, 43, 45) on every GPU, 0.05 per GPU-day, and a cleanup XID 45
  after half the hardware failures: none may count;
- hardware warnings (63, 74, 92, 94) at 1 per 1,000 GPU-days: signals, not failures;
- 16 GPUs that fail, are repaired and fail again within 7 days, once;
- jobs on every GPU, back to back, some failing for their users' reasons, some ended by a
  failure, some killed with no XID (`bench/reliability_jobs.py`, a stream of their own).

`scale` (default 1) multiplies the nodes of each class, for a quicker, smaller fleet.
"""

import random
from dataclasses import dataclass, field

from bench.reliability_jobs import fleet_jobs

CLASSES = (("A100-80GB", "NVIDIA A100-SXM4-80GB", 2.0, 96),   # name, model, per 1000, nodes
           ("H100-80GB", "NVIDIA H100 80GB HBM3", 4.0, 96),
           ("L40S", "NVIDIA L40S", 1.0, 64))
GPUS_PER_NODE = 8
DRIFT_CLASS, DRIFT_DAY = "H100-80GB", 120
LEMON_MULTIPLES = (10, 20, 40)
LEMONS_PER_MULTIPLE = 8
NODE_LEMONS, NODE_LEMON_MULTIPLE = 4, 5
APP_XID_RATE = 0.05
WARNING_RATE = 0.001
RECURRING = 16
FAILURE_MIX = ((79, 30), (48, 10), (95, 15), (119, 15), (120, 5), ("gpu_lost", 15),
               (64, 5), ("ecc_uncorrected", 5))
WARNING_XIDS = (63, 74, 92, 94)
APP_XIDS = (13, 31, 43, 45)


@dataclass
class Event:
    node: int
    gpu: int  # index in the node
    at_s: int  # seconds after the start
    type: str
    xid: int | None = None
    critical: bool = False  # a hardware failure (ends the job on the GPU)


@dataclass
class Workload:
    name: str
    days: int
    classes: list  # (name, NVML model name)
    nodes: list  # (hostname, class name)
    events: list[Event]
    lemon_gpus: dict = field(default_factory=dict)  # (node, gpu) -> multiple
    lemon_nodes: set = field(default_factory=set)
    drift: tuple | None = None  # (class, day the rate doubles)
    hardware_failures: int = 0  # generated critical failures (before incident merging)
    lemon_expected: dict = field(default_factory=dict)  # (node, gpu) -> failures expected
    app_xids: int = 0
    jobs: list = field(default_factory=list)  # BenchJob


def _poisson_times(rng: random.Random, rate_per_day: float, start_d: float, end_d: float):
    t = start_d
    while rate_per_day > 0:
        t += rng.expovariate(rate_per_day)
        if t >= end_d:
            return
        yield t


def _failure(rng, node, gpu, day, events) -> None:
    kind = rng.choices([k for k, _ in FAILURE_MIX], [w for _, w in FAILURE_MIX])[0]
    at = int(day * 86400)
    if isinstance(kind, int):
        events.append(Event(node, gpu, at, "xid", kind, critical=True))
    else:
        events.append(Event(node, gpu, at, kind, critical=True))
    if rng.random() < 0.5:  # the driver's cleanup of the killed program: an application XID
        events.append(Event(node, gpu, at + 30, "xid", 45))


def workload(*, days: int = 180, seed: int = 7, scale: float = 1.0) -> Workload:
    rng, lemon_rng = random.Random(seed), random.Random(f"lemon-warnings:{seed}")
    nodes = []
    for name, _, _, count in CLASSES:
        count = max(4, round(count * scale))
        nodes += [(f"{name.split('-')[0].lower()}-{i:03d}", name) for i in range(count)]
    rate_of = {name: per_1000 / 1000 for name, _, per_1000, _ in CLASSES}
    slots = [(n, g) for n in range(len(nodes)) for g in range(GPUS_PER_NODE)]
    picked = rng.sample(slots, len(LEMON_MULTIPLES) * LEMONS_PER_MULTIPLE + RECURRING)
    lemons = {slot: LEMON_MULTIPLES[i // LEMONS_PER_MULTIPLE]
              for i, slot in enumerate(picked[:len(LEMON_MULTIPLES) * LEMONS_PER_MULTIPLE])}
    recurring = picked[len(lemons):]
    lemon_nodes = set(rng.sample([n for n in range(len(nodes))
                                  if not any((n, g) in lemons for g in range(GPUS_PER_NODE))],
                                 NODE_LEMONS))
    events: list[Event] = []
    failures = 0
    for node, gpu in slots:
        klass = nodes[node][1]
        multiple = lemons.get((node, gpu), NODE_LEMON_MULTIPLE if node in lemon_nodes else 1)
        base = rate_of[klass] * multiple
        phases = [(0, days, base)]
        if klass == DRIFT_CLASS and multiple == 1:
            phases = [(0, DRIFT_DAY, base), (DRIFT_DAY, days, 2 * base)]
        for start, end, rate in phases:
            for day in _poisson_times(rng, rate, start, end):
                _failure(rng, node, gpu, day, events)
                failures += 1
        for day in _poisson_times(rng, WARNING_RATE, 0, days):
            events.append(Event(node, gpu, int(day * 86400), "xid", rng.choice(WARNING_XIDS)))
        # a lemon's faulty part warns at its multiple too; drawn apart, so the fleet's
        # failures are those the same seed gave before lemons warned
        for day in _poisson_times(lemon_rng, WARNING_RATE * (multiple - 1), 0, days):
            events.append(Event(node, gpu, int(day * 86400), "xid",
                                lemon_rng.choice(WARNING_XIDS)))
        for day in _poisson_times(rng, APP_XID_RATE, 0, days):
            events.append(Event(node, gpu, int(day * 86400), "xid", rng.choice(APP_XIDS)))
    for node, gpu in recurring:  # fails, is repaired, fails again within a week
        day = rng.uniform(20, days - 10)
        for again in (day, day + rng.uniform(1, 6)):
            _failure(rng, node, gpu, again, events)
            failures += 1
    app = sum(1 for e in events if e.type == "xid" and e.xid in APP_XIDS)
    expected = {slot: m * rate_of[nodes[slot[0]][1]] * days for slot, m in lemons.items()}
    work = Workload(name=f"fleet{len(slots)}", days=days,
                    classes=[(n, m) for n, m, _, _ in CLASSES], nodes=nodes,
                    events=sorted(events, key=lambda e: (e.at_s, e.node, e.gpu)),
                    lemon_gpus=lemons, lemon_nodes=lemon_nodes, drift=(DRIFT_CLASS, DRIFT_DAY),
                    hardware_failures=failures, app_xids=app, lemon_expected=expected)
    multiple_of = {**{(n, g): NODE_LEMON_MULTIPLE for n in lemon_nodes
                      for g in range(GPUS_PER_NODE)}, **lemons}
    work.jobs = fleet_jobs(work, seed=seed, rate_of=rate_of, multiple_of=multiple_of)
    return work
