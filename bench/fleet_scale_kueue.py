"""The Kubernetes backend with Kueue at fleet scale (issue 34): the reconcile and the two
observe loops against fake API servers holding what such clusters hold.

    .venv/bin/python -m bench.fleet_scale_kueue [--gpus 1000 --gpus 10000 ...] [--runs 2]
        [--database gq_bench_fleet_kueue] [--dra]

It recreates its database and grows `bench.fleet_scale`'s fleet through the sizes
(`bench.fleet_scale_seed`: clusters of up to 10,000 GPUs, a team per 50 GPUs, 70 % of the
nodes reserved, 10 % of those GPUs lent; no samples nor rollups, which these loops do not
read), makes every cluster a Kubernetes cluster with Kueue behind a fake API server of its
own (`bench.fleet_scale_kube`: a pod per node, a pod and its Workload per reserved node,
evicted pods, reclamation preemptions; every team a namespace on every cluster) and at each
size runs, through their Celery tasks as `bench.fleet_scale` does:

- `kueue-reconcile-first`: `schedulers-reconcile-all` after the growth (an install, at the
  first size: every ResourceFlavor, ClusterQueue, LocalQueue and admission policy created);
- `kueue-reconcile-steady`: the same, `--runs` times more: nothing changed, so it must send
  no write (checked: the bench stops otherwise);
- `kueue-reconcile-one-team`: one GPU of one team on the first cluster lent, then the
  same: exactly one write, a PATCH of that team's ClusterQueue (checked);
- `kubernetes-pods-killed-observe` and `kubernetes-returns-observe`: their first run after
  the growth (the new evicted pods recorded, the returned loans freed) and their steady run;
- `jobs-refresh`: the pods' jobs collected from the agents' process records (a record a
  minute for each reserved GPU's pod, the last hour up to now, stored just before): its
  first run after the growth (the new pods' jobs written) and its steady run.

For each it prints

    RESULT loop=<name> gpus=<n> cpu_s=<n> pg_cpu_s=<n> apiserver_cpu_s=<n> queries=<n>
        api_calls=<n> api_writes=<n> period_s=<n> period_share=<fraction>

with cpu_s the worker's (this process), pg_cpu_s its PostgreSQL backend's, apiserver_cpu_s
the fake API servers' (not counted in the share: the cluster's own API server pays it),
api_calls the requests the Kubernetes client sent (api_writes those other than GET) and
period_share = (cpu_s + pg_cpu_s) / period; after the last size, `RESULT growth` lines as
`bench.fleet_scale` prints them. It is not a test.

With `--dra` the clusters are Kubernetes 1.37 with the NVIDIA DRA driver publishing a
ResourceSlice per node and every backend in the exact-GPU mode (`bench.fleet_scale_kube`):
the reconcile also writes a claim template per held reservation and namespace and a
DeviceTaintRule per reserved GPU not on loan, so one team's lent GPU is three writes (its
ClusterQueue and its claim template patched, the GPU's DeviceTaintRule deleted: checked),
and the returns read the ResourceClaims. Each RESULT line then says `mode=dra`.
"""

import argparse
import os
import resource
import time
from unittest import mock

from bench.fleet_scale import BUDGET, TARGET, exponent, loop_run, period_s
from bench.ingest import database_create, env_for

DATABASE = "gq_bench_fleet_kueue"
RECONCILE = "schedulers-reconcile-all"
OBSERVE = ("kubernetes-pods-killed-observe", "kubernetes-returns-observe")
JOBS = "jobs-refresh"


class ApiCalls:
    """Counts the requests the Kubernetes client sends, by method."""

    def __init__(self):
        from kubernetes.client.rest import RESTClientObject

        self.by_method: dict[str, int] = {}
        original = RESTClientObject.request

        def request(client, method, url, *args, **kwargs):
            self.by_method[method] = self.by_method.get(method, 0) + 1
            return original(client, method, url, *args, **kwargs)

        self.patch = mock.patch.object(RESTClientObject, "request", request)

    def __enter__(self):
        self.by_method.clear()
        self.patch.start()
        return self

    def __exit__(self, *exc):
        self.patch.stop()

    @property
    def writes(self) -> int:
        return sum(n for method, n in self.by_method.items() if method != "GET")


def timed(app, entry: dict, site) -> dict:
    """`loop_run` with the API calls counted and the API servers' CPU read."""
    with ApiCalls() as calls:
        server_cpu = site.cpu_s()
        run = loop_run(app, entry)
        server_cpu = site.cpu_s() - server_cpu
    summaries = (run["result"] or {}).get("clusters", {}) if isinstance(run["result"], dict) else {}
    failed = {
        slug: s.get("error")
        for slug, s in summaries.items()
        if isinstance(s, dict) and s.get("outcome") not in ("ok", None)
    }
    if failed:
        raise RuntimeError(f"{entry['task']}: {failed}")
    return {**run, "api": dict(calls.by_method), "writes": calls.writes, "server_cpu": server_cpu}


def one_loan_lend() -> str:
    """Lend one GPU of a reservation held now on the first cluster (not yet lent): its team's
    ClusterQueue's lendingLimit goes up by one. Returns the team's slug."""
    from django.db.models import Exists, OuterRef
    from django.utils import timezone

    from gpuquota.reservations.models import Assignment, Loan

    now = timezone.now().replace(microsecond=0)
    assignment = (
        Assignment.objects.filter(
            gpu__node__cluster__slug="cluster-0",
            assigned_from__lte=now,
            assigned_until__gt=now,
            reservation__status="active",
        )
        .filter(~Exists(Loan.objects.filter(gpu=OuterRef("gpu"), returned_at__isnull=True)))
        .select_related("reservation__team")
        .order_by("-id")
        .first()
    )
    Loan.objects.create(
        assignment=assignment,
        gpu_id=assignment.gpu_id,
        lent_from=now - timezone.timedelta(seconds=1),
        lend_reason="bench: one team changed",
    )
    return assignment.reservation.team.slug


def result_print(name: str, size: int, run: dict, period: float, dra: bool = False) -> None:
    share = (run["cpu"] + run["pg"]) / period
    api = ",".join(f"{m}:{n}" for m, n in sorted(run["api"].items())) or "-"
    mode = " mode=dra" if dra else ""
    print(
        f"RESULT loop={name} gpus={size}{mode} wall_s={run['wall']:.3f} cpu_s={run['cpu']:.3f} "
        f"pg_cpu_s={run['pg']:.3f} apiserver_cpu_s={run['server_cpu']:.3f} "
        f"queries={run['queries']} api_calls={sum(run['api'].values())} "
        f"api_writes={run['writes']} api={api} period_s={period:.0f} "
        f"period_share={share:.5f}",
        flush=True,
    )


def pod_records_seed(*, since, until) -> int:
    """The agents' process records of every pod on a reserved GPU (`bench.fleet_scale_kube`
    names them `train-<node id>-0`, in the team's namespace), a record a minute from
    `since` to `until`, as agents on a Kubernetes fleet send them; rows added."""
    from django.db import connection

    from gpuquota.ingest.partitions import partitions_ensure

    partitions_ensure(days={since.date(), until.date()})
    with connection.cursor() as cursor:
        cursor.execute(POD_RECORDS_SQL, {"since": since, "until": until})
        return cursor.rowcount


POD_RECORDS_SQL = """
INSERT INTO ingest_processrecord (gpu_id, window_start, window_end, pid, pid_start, uid,
    "user", command, job_source, job_id, job_account, memory_used_bytes_max, util_sm_avg,
    received_at)
SELECT g.id, m, m + interval '1 minute', 100 + g.index, 1, 1000, 'u1', 'python',
       'kubernetes', 'train-' || g.node_id || '-0', t.slug, 40 * 1073741824::bigint, 50,
       m + interval '70 seconds'
FROM reservations_assignment a
JOIN inventory_gpu g ON g.id = a.gpu_id
JOIN reservations_reservation r ON r.id = a.reservation_id
JOIN accounts_team t ON t.id = r.team_id
CROSS JOIN generate_series(%(since)s::timestamptz, %(until)s::timestamptz - interval '1 minute',
                           interval '1 minute') m
WHERE a.assigned_from <= %(until)s AND a.assigned_until > %(until)s
  AND r.status = 'active'
ON CONFLICT DO NOTHING
"""


#: The writes of one team's GPU lent: its ClusterQueue (and in the DRA mode its claim
#: template, the team having one namespace per cluster) patched, the GPU's taint rule deleted.
ONE_TEAM_WRITES = {False: {"PATCH": 1}, True: {"PATCH": 2, "DELETE": 1}}


def size_measure(
    app, entries: dict, site, size: int, runs: int, pods: bool = False
) -> dict[str, dict]:
    """Every loop of the module's docstring at the fleet's current size; with `pods`, the
    pods' process records of the last hour are stored and `jobs-refresh` timed too."""
    dra = getattr(site, "dra", False)
    measured = {}
    reconcile = entries[RECONCILE]
    measured["kueue-reconcile-first"] = timed(app, reconcile, site)
    for _ in range(runs):
        steady = timed(app, reconcile, site)
        if steady["writes"]:
            raise RuntimeError(f"a steady reconcile wrote: {steady['api']}")
    measured["kueue-reconcile-steady"] = steady
    team = one_loan_lend()
    changed = timed(app, reconcile, site)
    writes = {m: n for m, n in changed["api"].items() if m != "GET"}
    if writes != ONE_TEAM_WRITES[dra]:
        raise RuntimeError(f"one team ({team}) changed, the reconcile sent {changed['api']}")
    measured["kueue-reconcile-one-team"] = changed
    loops = list(OBSERVE)
    if pods:
        from django.utils import timezone

        until = timezone.now().replace(second=0, microsecond=0)
        rows = pod_records_seed(since=until - timezone.timedelta(hours=1), until=until)
        print(f"pods: {rows:,} process records to {until:%H:%M}", flush=True)
        loops.append(JOBS)
    for name in loops:
        measured[f"{name}-first"] = timed(app, entries[name], site)
        for _ in range(runs):
            measured[name] = timed(app, entries[name], site)
    found = {}
    for name, run in measured.items():
        entry = entries[name.removesuffix("-first")] if name.startswith(tuple(loops)) else reconcile
        found[name] = {**run, "period": period_s(entry["schedule"])}
        result_print(name, size, run, found[name]["period"], dra)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, action="append")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--dra", action="store_true", help="the exact-GPU (DRA) mode")
    args = parser.parse_args()
    sizes = sorted(args.gpus or [1000, 10000])
    database_create(args.database)
    os.environ.update(env_for(args.database))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpuquota.settings")
    import django

    django.setup()
    from django.utils import timezone

    from bench.fleet_scale_kube import Site, kube_fake_install
    from bench.fleet_scale_seed import fleet_grow
    from gpuquota.celery import app, collect_beat_schedule

    # At the hour: the seed writes no samples (these loops do not read them).
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    entries = collect_beat_schedule()
    print(
        f"setup: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; sizes {sizes}"
        f"{'; DRA exact-GPU mode' if args.dra else ''}"
    )
    site = Site(dra=args.dra)
    measured: dict[int, dict[str, dict]] = {}
    try:
        for size in sizes:
            began = time.perf_counter()
            added = fleet_grow(size, now, 0)
            added |= kube_fake_install(site, now)
            print(
                f"fleet: {size:,} GPUs ({added}), {time.perf_counter() - began:.0f} s to "
                f"grow; load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            measured[size] = size_measure(app, entries, site, size, args.runs, pods=True)
    finally:
        site.stop()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"RESULT worker_max_rss_mb={rss_mb:.0f} (this process, the fleet's seeding included)")
    growth_print(measured, sizes)


def growth_print(measured: dict[int, dict[str, dict]], sizes: list[int]) -> None:
    if len(sizes) < 2:
        return
    small, large = sizes[0], sizes[-1]
    print(f"growth {small:,} -> {large:,} GPUs; load average {os.getloadavg()[0]:.1f}")
    for name in measured[small]:
        a, b = measured[small][name], measured[large][name]
        k_cpu = exponent(a["cpu"] + a["pg"], b["cpu"] + b["pg"], small, large)
        k_q = exponent(a["queries"], b["queries"], small, large)
        k_api = exponent(sum(a["api"].values()), sum(b["api"].values()), small, large)
        at_target = (b["cpu"] + b["pg"]) * (TARGET / large) ** max(
            k_cpu, 1.0 if large < TARGET else 0
        )
        share = at_target / b["period"]
        flags = [
            f
            for f, bad in (
                ("OVER_BUDGET", share > BUDGET),
                ("SUPERLINEAR", k_cpu > 1.2 and b["cpu"] + b["pg"] > 0.05),
                ("QUERIES_GROW", k_q > 0.2 and not name.endswith("-first")),
            )
            if bad
        ]
        print(
            f"RESULT growth loop={name} cpu_exponent={k_cpu:.2f} query_exponent={k_q:.2f} "
            f"api_call_exponent={k_api:.2f} cpu_s_at_{TARGET}={at_target:.2f} "
            f"period_share_at_{TARGET}={share:.4f} "
            f"{'measured' if large == TARGET else 'extrapolated'} {' '.join(flags)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
