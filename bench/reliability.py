"""Reliability benchmark: a generated fleet's failure history fed through the agent
protocol's server path (`batch_check`, `batch_ingest`: each node's GPUs, then its events
in batches of at most a month), then the lemon and drift detectors replayed day by day at
`as_of` instants on the stored history.

    .venv/bin/python -m bench.reliability [--workload bench.reliability_fleet:workload]
                                          [--days 180] [--seed 7]

The generator's interface is `workload(*, days, seed) -> Workload`
(`bench/reliability_fleet.py`). Reported: the recall and precision of the lemon list on
the last day (GPUs and nodes together; a flagged GPU on a planted lemon node, or a flagged
node holding a planted lemon GPU, counts as found), recall per planted multiple, false
flags per evaluated day (units flagged that nothing planted explains, averaged over the
days from day 90), the days from the planted rate change to the class's drift flag, and
the application XIDs counted as hardware. The last line:

    RESULT lemon_recall=<percent> lemon_precision=<percent> false_flags_per_day=<n>
           drift_days=<n> drain_p95_s=<n> app_xid_counted=<n>

`drain_p95_s`: the time from a critical event's batch to its node showing DRAIN on the dev
Slurm cluster (`bench/reliability_drain.py`), p95 of 20 trials plus the drain task's whole
interval (an upper bound); `na` with `--no-slurm` or where the dev cluster cannot start.
"""

import argparse
import importlib
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

from bench.reliability_drain import drain_latency
from bench.reliability_jobs import jobs_ingest
from bench.simdb import django_on_fresh_database

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAMESPACE = uuid.UUID("6f0c6f2e-3c57-4b7e-9a55-7b1f4c2d0a31")
CHUNK_DAYS = 30
FIRST_EVAL_DAY = 90


def iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_uuid(node: int, gpu: int) -> str:
    return "GPU-" + str(uuid.uuid5(NAMESPACE, f"{node}:{gpu}"))


def _body(hostname: str, seq: int, sent_at: datetime, gpus: list, events: list) -> dict:
    return {"schema_version": 1, "sent_at": iso(sent_at),
            "batch_id": str(uuid.uuid5(NAMESPACE, f"{hostname}:{seq}")),
            "agent_instance_id": str(uuid.uuid5(NAMESPACE, hostname)),
            "seq_first": seq, "seq_last": seq,
            "node": {"hostname": hostname, "agent_version": "bench", "boot_id": "bench-boot",
                     "spool_backlog": 0, "dropped_records_total": 0},
            "gpus": gpus, "samples": [], "processes": [], "events": events}


def ingest(work) -> dict:
    """Every node's GPUs at T0, then its events, through the protocol's server path."""
    from gpuquota.ingest.batches import batch_ingest
    from gpuquota.ingest.protocol import batch_check
    from gpuquota.inventory.models import Cluster, GpuClass, GpuModelMapping, Node

    cluster = Cluster.objects.create(name="Bench", slug="bench", scheduler="slurm")
    for name, model in work.classes:
        GpuModelMapping.objects.create(model_name=model,
                                       gpu_class=GpuClass.objects.create(name=name))
    model_of = dict(work.classes)
    nodes = [Node.objects.create(cluster=cluster, hostname=h) for h, _ in work.nodes]
    by_node_chunk = defaultdict(list)
    for e in work.events:
        by_node_chunk[e.node, e.at_s // (CHUNK_DAYS * 86400)].append(e)
    started, batches, rejected = time.monotonic(), 0, 0
    for index, node in enumerate(nodes):
        gpus = [{"uuid": gpu_uuid(index, g), "index": g, "name": model_of[work.nodes[index][1]],
                 "pci_bus_id": f"00000000:{g + 16:02X}:00.0", "mig_parent_uuid": None}
                for g in range(8)]
        batch_ingest(node=node, body=batch_check(_body(node.hostname, 0, T0, gpus, [])),
                     now=T0, check_age=False)
        for chunk in range(work.days // CHUNK_DAYS + 1):
            events = by_node_chunk.get((index, chunk), [])
            if not events:
                continue
            records = [{"event_id": str(uuid.uuid5(NAMESPACE, f"{index}:{n}:{e.at_s}:{e.gpu}")),
                        "gpu_uuid": gpu_uuid(index, e.gpu),
                        "ts": iso(T0 + timedelta(seconds=e.at_s)), "type": e.type,
                        "xid": e.xid, "detail": None} for n, e in enumerate(events)]
            sent = T0 + timedelta(days=min(work.days, (chunk + 1) * CHUNK_DAYS))
            result = batch_ingest(node=node, body=batch_check(
                _body(node.hostname, chunk + 1, sent, [], records)), now=sent, check_age=False)
            batches += 1
            rejected += len(result.body["rejected"])
    ingest_s, started = round(time.monotonic() - started, 1), time.monotonic()
    polls = jobs_ingest(cluster, work, T0) if getattr(work, "jobs", None) else 0
    return {"batches": batches, "events": len(work.events), "rejected": rejected,
            "ingest_s": ingest_s, "polls": polls,
            "jobs_ingest_s": round(time.monotonic() - started, 1)}


def truth(work) -> tuple[set, set, dict]:
    """(GPU keys, node keys) of what was planted, and each lemon GPU's multiple."""
    lemon_gpus = {gpu_uuid(n, g): m for (n, g), m in work.lemon_gpus.items()}
    node_key = {i: f"bench/{h}" for i, (h, _) in enumerate(work.nodes)}
    bad_gpus = set(lemon_gpus) | {gpu_uuid(n, g) for n in work.lemon_nodes for g in range(8)}
    bad_nodes = {node_key[n] for n in work.lemon_nodes} | {
        node_key[n] for (n, _g) in work.lemon_gpus}
    return bad_gpus, bad_nodes, lemon_gpus


def evaluate(work) -> dict:
    """The figures of the detector as it is ("jobs": failed jobs counted) and on hardware
    incidents alone ("incidents": the job signal switched off), on the same history."""
    from gpuquota.reliability.drift import drift_from
    from gpuquota.reliability.history import fleet_history
    from gpuquota.reliability.lemons import WINDOW, lemons_from

    bad_gpus, bad_nodes, _ = truth(work)
    false_per_day = {mode: [] for mode in MODES}
    drift_day, other_drift, eval_s, last = None, set(), [], {}
    for day in range(FIRST_EVAL_DAY, work.days + 1):
        as_of = T0 + timedelta(days=day)
        started = time.monotonic()
        history = fleet_history(as_of=as_of, since=as_of - 2 * WINDOW)
        for mode in MODES:
            gpus = {f.key for f in lemons_from(history, kind="gpu", jobs=mode == "jobs")}
            nodes = {f.key for f in lemons_from(history, kind="node", jobs=mode == "jobs")}
            false_per_day[mode].append(len(gpus - bad_gpus) + len(nodes - bad_nodes))
            last[mode] = {"gpus": gpus, "nodes": nodes}
        drifting = drift_from(history, lemons=last["jobs"]["gpus"] | last["jobs"]["nodes"])
        eval_s.append(time.monotonic() - started)
        if work.drift and day >= work.drift[1]:
            if drift_day is None and any(d.kind == "class" and d.key == work.drift[0]
                                         for d in drifting):
                drift_day = day
        other_drift |= {d.key for d in drifting if d.kind == "class" and d.key != work.drift[0]}
    return {"modes": {mode: _scores(work, last[mode], false_per_day[mode]) for mode in MODES},
            "drift_days": None if drift_day is None else drift_day - work.drift[1],
            "other_classes_drifting": sorted(other_drift),
            "eval_s_mean": sum(eval_s) / len(eval_s)}


MODES = ("jobs", "incidents")


def _scores(work, last: dict, false_per_day: list) -> dict:
    bad_gpus, bad_nodes, lemon_gpus = truth(work)
    planted = set(lemon_gpus) | {f"bench/{work.nodes[n][0]}" for n in work.lemon_nodes}
    found = (set(lemon_gpus) & last["gpus"]) | (
        {f"bench/{work.nodes[n][0]}" for n in work.lemon_nodes} & last["nodes"])
    flagged = last["gpus"] | last["nodes"]
    true_flags = (last["gpus"] & bad_gpus) | (last["nodes"] & bad_nodes)
    by_multiple = defaultdict(lambda: [0, 0])
    for key, multiple in lemon_gpus.items():
        by_multiple[multiple][1] += 1
        by_multiple[multiple][0] += key in last["gpus"]
    by_multiple["node"] = [len({f"bench/{work.nodes[n][0]}" for n in work.lemon_nodes}
                               & last["nodes"]), len(work.lemon_nodes)]
    likely = [gpu_uuid(n, g) for (n, g), e in work.lemon_expected.items() if e >= 5]
    return {"recall": 100 * len(found) / len(planted),
            "recall_expected_ge_5": (100 * len(set(likely) & last["gpus"]) / len(likely)
                                     if likely else None), "likely": len(likely),
            "precision": 100 * len(true_flags) / len(flagged) if flagged else 100.0,
            "false_flags_per_day": sum(false_per_day) / len(false_per_day),
            "false_flags_max": max(false_per_day),
            "by_multiple": dict(by_multiple), "flagged": len(flagged)}


def found_by_multiple(scores: dict) -> str:
    """`_scores`' lemons found per planted multiple, as the DETAIL lines print them."""
    return " ".join(f"{m}x={f}/{t}" if m != "node" else f"node={f}/{t}"
                    for m, (f, t) in sorted(scores["by_multiple"].items(), key=str))


def app_xids_counted(work) -> tuple[int, int]:
    """(application XIDs inside a counted incident, hardware failures counted)."""
    from gpuquota.ingest.taxonomy import APPLICATION_XIDS
    from gpuquota.reliability.history import fleet_history

    history = fleet_history(as_of=T0 + timedelta(days=work.days))
    counted = sum(1 for i in history.incidents for _ts, label in i.events
                  if label.startswith("xid ") and int(label[4:]) in APPLICATION_XIDS)
    return counted, len(history.failures())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="bench.reliability_fleet:workload")
    parser.add_argument("--days", type=int, default=180)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="the generator's nodes times this (a quicker, smaller fleet)")
    parser.add_argument("--database", default="gq_failures_reliability_bench")
    parser.add_argument("--no-slurm", action="store_true",
                        help="skip the drain latency on the dev Slurm cluster")
    args = parser.parse_args()
    module, _, function = args.workload.partition(":")
    scale = {"scale": args.scale} if args.scale != 1 else {}
    work = getattr(importlib.import_module(module), function or "workload")(
        days=args.days, seed=args.seed, **scale)
    django_on_fresh_database(args.database)
    fed = ingest(work)
    print(f"DETAIL fleet={work.name} gpus={len(work.nodes) * 8} days={work.days} "
          f"events={fed['events']} hardware_failures_generated={work.hardware_failures} "
          f"app_xids_generated={work.app_xids} batches={fed['batches']} "
          f"rejected={fed['rejected']} ingest_s={fed['ingest_s']}")
    print(f"DETAIL jobs={len(work.jobs)} jobs_by_end="
          f"{','.join(f'{c}:{n}' for c, n in sorted(Counter(j.cause for j in work.jobs).items()))}"
          f" polls={fed['polls']} jobs_ingest_s={fed['jobs_ingest_s']}")
    result = evaluate(work)
    counted, failures = app_xids_counted(work)
    for mode in ("incidents", "jobs"):
        scores = result["modes"][mode]
        found = found_by_multiple(scores)
        print(f"DETAIL signal={mode} lemon_recall={scores['recall']:.1f} lemon_precision="
              f"{scores['precision']:.1f} false_flags_per_day="
              f"{scores['false_flags_per_day']:.2f} false_flags_max_day="
              f"{scores['false_flags_max']} flagged_last_day={scores['flagged']} {found}")
    print(f"DETAIL other_classes_drifting={','.join(result['other_classes_drifting']) or 'none'}"
          f" failures_counted={failures} eval_s_per_day={result['eval_s_mean']:.2f}")
    drift_days = "none" if result["drift_days"] is None else result["drift_days"]
    drain = None if args.no_slurm else drain_latency()
    if drain:
        print(f"DETAIL drain_trials={drain['trials']} event_to_drain_p50_s={drain['p50_s']} "
              f"event_to_drain_p95_s={drain['p95_s']} (task run at once); reported: "
              f"+ the task's interval, an upper bound")
    scores = result["modes"]["jobs"]
    print(f"RESULT lemon_recall={scores['recall']:.1f} lemon_precision="
          f"{scores['precision']:.1f} false_flags_per_day={scores['false_flags_per_day']:.2f} "
          f"drift_days={drift_days} drain_p95_s={drain['bound_p95_s'] if drain else 'na'} "
          f"app_xid_counted={counted}")


if __name__ == "__main__":
    main()
