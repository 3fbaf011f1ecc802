"""The fleet of `bench.fleet_scale`, grown in steps (1,000 → 10,000 → 100,000 GPUs) in one
database: each step adds clusters of up to 10,000 GPUs (nodes of 8), teams (one per 50
GPUs: 2,000 at 100,000) with a quota per class, and for the new GPUs, with `bulk_create`
and `INSERT ... SELECT generate_series` (no service, no per-row Python beyond the objects):

- 70 % of the nodes reserved whole by a team, active from three days ago to ten days
  ahead, and 20 % of those with an earlier reservation of the month that ended (churn);
  5 % of the nodes booked from tomorrow (scheduled);
- 10 % of the active reserved GPUs lent (an open loan since an hour ago);
- 1 % of the GPUs failed and 1 % degraded (open health intervals);
- the last `hours` closed hours of rollups (one reserved or unreserved row per GPU-hour),
  the open hour's minute samples up to now and an outbox mark per GPU for it, as in
  steady state.
"""

from datetime import timedelta

CLUSTER_GPUS = 10_000
GPUS_PER_NODE = 8
CLASSES = ("H100-80GB", "A100-40GB", "L4")


def _hour(at):
    return at.replace(minute=0, second=0, microsecond=0)


def fleet_grow(target: int, now, hours: int) -> dict:
    """Add GPUs (and what comes with them) until the fleet has `target`; counts added."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from accounts.models import Team
    from gpuquota.ingest.partitions import partitions_ensure
    from gpuquota.inventory.models import (
        Cluster,
        Gpu,
        GpuClass,
        GpuClassInterval,
        GpuHealthInterval,
        Node,
    )
    from gpuquota.reservations.models import Assignment, Loan, Quota, Reservation
    from gpuquota.usage.rollup_days import rollup_days_rebuild
    from gpuquota.usage.rollup_fleet import rollup_fleet_rebuild

    admin = get_user_model().objects.filter(username="bench-admin").first() or \
        get_user_model().objects.create_superuser("bench-admin", "a@example.org", "x")
    classes = [GpuClass.objects.get_or_create(name=name)[0] for name in CLASSES]
    have = Gpu.objects.count()
    after = Gpu.objects.order_by("-id").values_list("id", flat=True).first() or 0
    nodes_new = (target - have) // GPUS_PER_NODE
    if nodes_new <= 0:
        return {"gpus": 0}
    commissioned = now - timedelta(days=60)
    # Clusters of up to CLUSTER_GPUS: fill the last one, then open new ones.
    node_rows, n0 = [], Node.objects.count()
    for n in range(n0, n0 + nodes_new):
        c = n * GPUS_PER_NODE // CLUSTER_GPUS
        cluster, _ = Cluster.objects.get_or_create(slug=f"cluster-{c}",
                                                   defaults={"name": f"Cluster {c}"})
        node_rows.append(Node(cluster=cluster, hostname=f"gpu{c:02d}-{n:06d}", last_seen_at=now,
                              agent_version="1.0.0", driver_version="580.65.06"))
    nodes = Node.objects.bulk_create(node_rows, batch_size=5000)
    gpus = Gpu.objects.bulk_create([
        Gpu(uuid=f"GPU-{n0 * 8 + k:08x}-0000-4000-8000-000000000000", node=node,
            gpu_class=classes[(n0 + j) // 125 % 3], index=i, commissioned_at=commissioned,
            memory_total_bytes=80 * 2**30)
        for j, node in enumerate(nodes) for i in range(GPUS_PER_NODE)
        for k in (j * GPUS_PER_NODE + i,)], batch_size=5000)
    GpuClassInterval.objects.bulk_create([
        GpuClassInterval(gpu=g, gpu_class_id=g.gpu_class_id, valid_from=commissioned)
        for g in gpus], batch_size=5000)
    teams_have = Team.objects.count()
    teams_want = max(8, target // 50)
    Team.objects.bulk_create([Team(name=f"Team {t}", slug=f"team-{t}")
                              for t in range(teams_have, teams_want)], batch_size=5000)
    teams = list(Team.objects.order_by("id"))
    new_teams = teams[teams_have:]
    per_team = max(8, target // len(teams))  # GPUs of a class each team is guaranteed
    Quota.objects.bulk_create([Quota(team=t, gpu_class=c, gpus=per_team,
                                     valid_from=now - timedelta(days=90))
                               for t in new_teams for c in classes], batch_size=5000)

    start, end = now - timedelta(days=3), now + timedelta(days=10)
    churn_from, churn_to = now - timedelta(days=20), now - timedelta(days=3, hours=1)
    made = {"active": [], "ended": [], "scheduled": []}
    reservations = []
    for j in range(len(nodes)):
        k = n0 + j
        team = teams[k % len(teams)]
        gpu_class_id = gpus[j * GPUS_PER_NODE].gpu_class_id
        kinds = []
        if k % 10 < 7:
            kinds.append(("active", start, end, Reservation.Status.ACTIVE))
            if k % 5 == 0:
                kinds.append(("ended", churn_from, churn_to, Reservation.Status.ENDED))
        elif k % 20 == 7:
            kinds.append(("scheduled", now + timedelta(days=1), now + timedelta(days=4),
                          Reservation.Status.SCHEDULED))
        for kind, s, e, status in kinds:
            reservations.append((kind, j, Reservation(
                team=team, gpu_class_id=gpu_class_id, count=GPUS_PER_NODE, start=s, end=e,
                status=status, requested_by=admin, requested_at=s - timedelta(hours=1),
                approved_at=s - timedelta(hours=1))))
    Reservation.objects.bulk_create([r for _, _, r in reservations], batch_size=5000)
    assignments = []
    for kind, j, r in reservations:
        for g in gpus[j * GPUS_PER_NODE:(j + 1) * GPUS_PER_NODE]:
            a = Assignment(reservation=r, gpu=g, assigned_from=r.start, assigned_until=r.end)
            assignments.append(a)
            made[kind].append(a)
    Assignment.objects.bulk_create(assignments, batch_size=5000)
    lent = [a for n, a in enumerate(made["active"]) if n % 10 == 3]
    Loan.objects.bulk_create([
        Loan(assignment=a, gpu_id=a.gpu_id, lent_from=now - timedelta(hours=1),
             lend_reason="idle for the lending window") for a in lent], batch_size=5000)
    GpuHealthInterval.objects.bulk_create([
        GpuHealthInterval(gpu=g, state="failed" if n % 100 == 17 else "degraded",
                          reason="xid 79", valid_from=now - timedelta(hours=2))
        for n, g in enumerate(gpus) if n % 100 in (17, 61)], batch_size=5000)

    open_hour = _hour(now)
    first = open_hour - timedelta(hours=hours)
    partitions_ensure(days={first.date(), open_hour.date(), now.date()})
    params = {"after": after, "now": now, "hour": open_hour}
    with connection.cursor() as cursor:
        at = first
        while at < open_hour:  # a statement per 6 hours of rollups
            step = min(at + timedelta(hours=6), open_hour)
            cursor.execute(ROLLUP_SQL, {**params, "start": at, "end": step})
            at = step
        cursor.execute(SAMPLES_SQL, {**params, "start": open_hour})
        cursor.execute(MARKS_SQL, params)
    rollup_days_rebuild(start=first.date())  # the day rows the sweep keeps with the hours
    rollup_fleet_rebuild(start=first.date())  # and the fleet's
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {"gpus": len(gpus), "nodes": len(nodes), "teams": len(teams),
            "assignments": len(assignments), "loans": len(lent)}


# One row per GPU-hour: reserved on the assignment of that hour, else unreserved.
ROLLUP_SQL = """
INSERT INTO usage_gpuhourusage (gpu_id, hour, gpu_class_id, kind, assignment_id,
    reservation_id, team_id, split_ways, failed, rate_card_id, covered_s, busy_s,
    util_weighted, energy_j, memory_used_bytes_max, process_count, users_seen, computed_at)
SELECT g.id, h, g.gpu_class_id,
       CASE WHEN a.id IS NULL THEN 'unreserved' ELSE 'reserved' END,
       a.id, a.reservation_id, r.team_id, 1, false, NULL, x.covered, least(x.covered, x.busy),
       least(x.covered, x.busy) * 61.25 + (x.covered - least(x.covered, x.busy)) * 1.5,
       x.covered * 300.0, 40 * 1073741824::bigint, 1, '[]'::jsonb, %(now)s
FROM inventory_gpu g
CROSS JOIN generate_series(%(start)s::timestamptz, %(end)s::timestamptz - interval '1 hour',
                           interval '1 hour') h
LEFT JOIN reservations_assignment a
       ON a.gpu_id = g.id AND a.assigned_from <= h AND a.assigned_until > h
LEFT JOIN reservations_reservation r ON r.id = a.reservation_id
CROSS JOIN LATERAL (SELECT (extract(epoch FROM h) / 3600)::bigint AS n) n0
CROSS JOIN LATERAL (SELECT 3600 - ((g.id * 7 + n0.n) %% 5) * 120 AS covered,
                           ((g.id * 7919 + n0.n * 104729) %% 4000) AS busy) x
WHERE g.id > %(after)s
"""

SAMPLES_SQL = """
INSERT INTO ingest_sample (gpu_id, window_start, window_end, readings, util_gpu_avg,
    memory_used_bytes_avg, memory_used_bytes_max, received_at)
SELECT g.id, m, m + interval '1 minute', 6,
       CASE WHEN g.id %% 4 = 0 THEN 0 ELSE ((g.id * 31 + extract(minute FROM m)) %% 100) END,
       40 * 1073741824::bigint, 40 * 1073741824::bigint, %(now)s
FROM inventory_gpu g
CROSS JOIN generate_series(%(start)s::timestamptz,
                           date_trunc('minute', %(now)s::timestamptz) - interval '1 minute',
                           interval '1 minute') m
WHERE g.id > %(after)s
"""

MARKS_SQL = """
INSERT INTO usage_dirtygpuhour (gpu_id, hour, generation, marked_at, due_at)
SELECT id, %(hour)s, 1, %(now)s::timestamptz - interval '1 minute',
       %(now)s::timestamptz - interval '10 seconds'
FROM inventory_gpu WHERE id > %(after)s
"""


def hardware_events_add(now, *, after_gpu_id: int) -> int:
    """Hardware XIDs received over the 60 days before the last hour for the GPUs after
    `after_gpu_id`, as the reliability figures read them: one on 2 % of the GPUs (79 and
    48, failures; 63, a remapped row) and six failures on one GPU in 2,000 (a lemon); none
    recent enough to drain a node now. Events added."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(EVENTS_SQL, {"after": after_gpu_id, "now": now})
        return cursor.rowcount


EVENTS_SQL = """
INSERT INTO ingest_gpuevent (event_id, node_id, gpu_id, ts, type, xid, received_at)
SELECT gen_random_uuid(), g.node_id, g.id, at.ts, 'xid',
       CASE WHEN k > 0 THEN 79 ELSE (ARRAY[79, 48, 63])[1 + g.id %% 3] END, at.ts
FROM inventory_gpu g
CROSS JOIN LATERAL generate_series(0, CASE WHEN g.id %% 2000 = 11 THEN 5 ELSE 0 END) k
CROSS JOIN LATERAL (SELECT %(now)s::timestamptz - interval '1 hour'
    - ((g.id * 7919 + k * 86400 * 9) %% 5184000) * interval '1 second' AS ts) at
WHERE g.id > %(after)s AND g.parent_id IS NULL AND (g.id %% 50 = 7 OR g.id %% 2000 = 11)
"""
