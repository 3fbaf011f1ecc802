"""The reliability figures computed once per period (docs/reliability.md#figures): the
`reliability.figures` task replays the fleet's history once and writes a snapshot (figures
per class, cluster, node and GPU, drift, lemons); the fleet page, the API's present figures
and /metrics read the latest. A fresh install with no snapshot yet computes one at its
first read, once."""

import dataclasses
import time
from datetime import datetime, timedelta

from django.db import transaction
from django.utils.dateparse import parse_datetime

from gpuquota.reliability.drift import BASE, RECENTS, drift_from
from gpuquota.reliability.history import fleet_history
from gpuquota.reliability.lemons import WINDOW, Flag, lemons_from
from gpuquota.reliability.models import FiguresSnapshot, UnitFigures
from gpuquota.reliability.selectors import failures_by, figures_from

DAYS = 90
#: How often the task runs; a snapshot older than twice this is shown as late.
FIGURES_INTERVAL_S = 900
UNITS_BATCH = 5000


def _flag_row(flag: Flag) -> dict:
    return {**dataclasses.asdict(flag), "first_flagged": flag.first_flagged.isoformat()}


def reliability_figures_write(*, as_of: datetime) -> FiguresSnapshot:
    """The figures as of `as_of`, replayed once from the history and stored; the older
    snapshots are removed (idempotent: a second run at the same instant replaces it)."""
    began = time.perf_counter()
    history = fleet_history(as_of=as_of, since=as_of - max(2 * WINDOW, max(RECENTS) + BASE))
    start = as_of - timedelta(days=DAYS)
    found = {kind: lemons_from(history, kind=kind) for kind in ("gpu", "node")}
    units = {kind: [f.as_dict() for f in figures_from(history, group=kind, start=start)]
             for kind in UnitFigures.Kind.values}
    fields = {
        "days": DAYS,
        "classes": [f.as_dict() for f in figures_from(history, group="class", start=start)],
        "clusters": [f.as_dict() for f in figures_from(history, group="cluster", start=start)],
        "by": {name: counts.most_common()
               for name, counts in failures_by(history, start=start).items()},
        "drift": [dataclasses.asdict(d) for d in drift_from(
            history, lemons={f.key for flags in found.values() for f in flags})],
        "gpu_lemons": [_flag_row(f) for f in found["gpu"]],
        "node_lemons": [_flag_row(f) for f in found["node"]],
    }
    with transaction.atomic():
        FiguresSnapshot.objects.filter(as_of__lte=as_of).delete()
        snapshot = FiguresSnapshot.objects.create(
            as_of=as_of, took_s=round(time.perf_counter() - began, 3), **fields)
        UnitFigures.objects.bulk_create(
            [UnitFigures(snapshot=snapshot, kind=kind, key=row["key"], figures=row)
             for kind, rows in units.items() for row in rows], batch_size=UNITS_BATCH)
    return snapshot


def _flags_read(rows: list[dict]) -> list[dict]:
    return [{**row, "first_flagged": parse_datetime(row["first_flagged"])} for row in rows]


def reliability_figures_latest(*, now: datetime) -> FiguresSnapshot:
    """The latest snapshot, its lemons' instants as datetimes; with none yet (a fresh
    install before the task's first run), one computed now."""
    snapshot = FiguresSnapshot.objects.order_by("-as_of").first()
    if snapshot is None:
        snapshot = reliability_figures_write(as_of=now)
    snapshot.gpu_lemons = _flags_read(snapshot.gpu_lemons)
    snapshot.node_lemons = _flags_read(snapshot.node_lemons)
    snapshot.late = now - snapshot.as_of > timedelta(seconds=2 * FIGURES_INTERVAL_S)
    return snapshot


def snapshot_figures(*, snapshot: FiguresSnapshot, group: str) -> list[dict]:
    """The snapshot's figures of every class, cluster, node or GPU, by key."""
    if group in ("class", "cluster"):
        return snapshot.classes if group == "class" else snapshot.clusters
    return list(snapshot.units.filter(kind=group).order_by("key")
                .values_list("figures", flat=True))


def snapshot_figures_of(*, snapshot: FiguresSnapshot, kind: str, key: str) -> list[dict]:
    """One GPU's or node's figures in the snapshot (none: not in service in its window)."""
    return list(snapshot.units.filter(kind=kind, key=key).values_list("figures", flat=True))
