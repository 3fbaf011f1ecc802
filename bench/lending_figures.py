"""The lending simulation's figures (`bench.lending`), from the product's records (rollups,
loans, assignments) and, for what only the workload knows (owner work that never ran, the
borrowers' checkpoints), from the simulation."""

from django.db import connection


def _percentile(values: list[int], p: float) -> int:
    """Nearest rank; 0 for no values."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, -(-len(ordered) * p // 100) - 1))]


def owner_works(slot) -> bool:
    """The owner computes in this minute: a run above 0 % (a job, a service under the busy
    threshold), not a kernel holding memory at 0 %."""
    return slot is not None and slot[0] is not None and slot[0].util > 0


def fleet_busy_s(t0, end) -> tuple[int, int]:
    """(busy seconds, failed seconds) of the fleet in [t0, end) from the hourly rollups:
    every busy second once (a split unreserved window counts once)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(busy_s::numeric / split_ways) FILTER (WHERE NOT failed), 0),"
            " coalesce(sum(covered_s::numeric / split_ways) FILTER (WHERE failed), 0)"
            " FROM usage_gpuhourusage WHERE hour >= %s AND hour < %s", [t0, end])
        busy, failed = cursor.fetchone()
    return int(busy), int(failed)


def _reclaim(clock) -> dict:
    """Owner work lost to reclaimed GPUs (minutes the owner computes after the release),
    and reclaim's false share (bench/reclaim.py): a released GPU is falsely released when
    its owner computes on it again before the reservation's end."""
    from gpuquota.reservations.models import Assignment

    end_minute = clock.minutes
    lost_min = returned_s = false_s = released = false_gpus = 0
    planned = {b.reservation_id: b.end for b in clock.fleet.booked}
    for a in Assignment.objects.filter(end_reason="reclaimed").values(
            "gpu_id", "reservation_id", "assigned_until"):
        released += 1
        until = min(planned[a["reservation_id"]], clock.at(end_minute))
        gone = max(0, int((until - a["assigned_until"]).total_seconds()))
        returned_s += gone
        m0 = int((a["assigned_until"] - clock.t0).total_seconds()) // 60
        slots = clock.owner[a["gpu_id"]]
        later = sum(1 for m in range(m0, m0 + gone // 60)
                    if owner_works(slots[m]) and not clock.failed(a["gpu_id"], m))
        lost_min += later
        if later >= 1:
            false_gpus += 1
            false_s += gone
    return {"owner_lost_gpu_h": lost_min / 60, "gpus_released": released,
            "released_gpu_h": round(returned_s / 3600, 1), "false_reclaims": false_gpus,
            "false_reclaim_share": round(false_s / returned_s, 4) if returned_s else 0.0}


def figures(clock, *, workload, policy: str) -> dict:
    from gpuquota.reservations.models import Loan

    end = clock.at(clock.minutes)
    installed_s = len(clock.fleet.gpus) * clock.minutes * 60
    busy_s, failed_s = fleet_busy_s(clock.t0, end)
    returns = [int((f - r).total_seconds()) for r, f in Loan.objects.filter(
        end_reason="owner_job").values_list("returned_at", "freed_at")]
    reasons = {}
    for reason in Loan.objects.values_list("end_reason", flat=True):
        reasons[reason or "open"] = reasons.get(reason or "open", 0) + 1
    b = clock.borrower
    reclaim = _reclaim(clock)
    owner_work = sum(1 for slots in clock.owner.values() for s in slots[:clock.minutes]
                     if owner_works(s))
    return {
        "workload": workload.name, "policy": policy,
        "fleet_busy": round(busy_s / installed_s, 4),
        "owner_lost_gpu_h": round(reclaim["owner_lost_gpu_h"], 1),
        "return_p50_s": _percentile(returns, 50), "return_p95_s": _percentile(returns, 95),
        "return_p99_s": _percentile(returns, 99), "returns": len(returns),
        "borrower_lost_share": round(b["lost_s"] / b["lent_s"], 4) if b["lent_s"] else 0.0,
        "false_reclaim_share": reclaim["false_reclaim_share"],
        "gpus": len(clock.fleet.gpus), "installed_gpu_h": round(installed_s / 3600, 1),
        "busy_gpu_h": round(busy_s / 3600, 1), "failed_gpu_h": round(failed_s / 3600, 1),
        "owner_work_gpu_h": round(owner_work / 60, 1),
        "lent_gpu_h": round(b["lent_s"] / 3600, 1),
        "borrower_run_gpu_h": round(b["run_s"] / 3600, 1),
        "borrower_lost_gpu_h": round(b["lost_s"] / 3600, 1),
        "borrower_done_gpu_h": round(b["done_s"] / 3600, 1),
        "preemptions": b["preemptions"], "loans": sum(reasons.values()),
        "loan_ends": reasons, "owner_waited_gpu_h": round(clock.owner_waited_s / 3600, 2),
        "reservations": len(clock.fleet.booked), "refused_reservations": clock.fleet.refused,
        **{k: v for k, v in reclaim.items() if k not in ("owner_lost_gpu_h",
                                                          "false_reclaim_share")},
        "batches": clock.agents.flushes,
    }

