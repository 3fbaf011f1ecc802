"""Which GPUs a batch may write: registered, moved or contested (agent-protocol.md).

A GPU listed by a node is registered when new. A GPU known on another node moves
to the reporting node once its current node has been silent about it for 15
minutes; while both report it, the newcomer's records for it are rejected and
admins are alerted (an audit entry, at most one an hour per GPU, and a log line).
"""

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from operator import itemgetter

from django.db import IntegrityError, connection, transaction

from gpuquota.core.models import AuditEntry
from gpuquota.core.services import audit_record
from gpuquota.ingest import conf
from gpuquota.ingest.parsing import uuid_normal
from gpuquota.ingest.records import GpuRef
from gpuquota.inventory.models import Gpu, Node, board_text_normalize
from gpuquota.inventory.services import gpu_move, gpu_register

logger = logging.getLogger(__name__)

CONTESTED = "GPU belongs to another live node"


def _referenced(body: dict) -> set[str]:
    raw = set().union(*(map(itemgetter("gpu_uuid"), body.get(kind) or ())
                        for kind in ("samples", "processes")))
    raw |= {r["gpu_uuid"] for r in body.get("events") or () if r.get("gpu_uuid")}
    return {n for n in map(uuid_normal, raw) if n}


def _alert_contested(*, gpu: Gpu, node: Node, now: datetime) -> None:
    logger.warning("GPU %s reported by %s while %s still reports it; records rejected",
                   gpu.uuid, node, gpu.node)
    recent = AuditEntry.objects.filter(action="gpu.contested", object_type="inventory.gpu",
                                       object_id=str(gpu.pk), at__gte=now - timedelta(hours=1))
    if not recent.exists():
        audit_record(actor=None, action="gpu.contested", obj=gpu,
                     changes={"claimed_by_node": str(node), "current_node": str(gpu.node)},
                     reason="Two live nodes report this GPU; the newcomer's records are rejected.")


def _claim(*, gpu: Gpu, node: Node, now: datetime) -> bool:
    """Move `gpu` here when its node has been silent about it for 15 minutes."""
    silence = timedelta(seconds=conf.GPU_MOVE_SILENCE_S)
    if gpu.last_seen_at is not None and gpu.last_seen_at > now - silence:
        _alert_contested(gpu=gpu, node=node, now=now)
        return False
    old_node = gpu.node
    gpu_move(gpu=gpu, node=node, at=now)
    audit_record(actor=None, action="gpu.move", obj=gpu,
                 changes={"from_node": str(old_node), "to_node": str(node)},
                 reason="Reported by a new node after 15 minutes of silence on the old one.")
    return True


def _text(value: str | None, length: int) -> str:
    return (value or "").replace("\x00", "")[:length]


GPU_LIMITS = {"index": (0, 2**31 - 1), "memory_total_bytes": (0, 2**63 - 1),
              "power_limit_w": (0, 1e6)}


def _gpu_entry_clean(entry: dict, path: str, nulled: list) -> dict:
    """The entry with out-of-range numbers nulled (and listed)."""
    clean = dict(entry)
    for name, (low, high) in GPU_LIMITS.items():
        value = entry.get(name)
        if value is not None and not low <= value <= high:
            nulled.append({"path": f"{path}.{name}", "why": f"must be {low}..{high}"})
            clean[name] = None
        elif value is not None and name != "power_limit_w":
            clean[name] = int(value)
    return clean


def _register(*, entry: dict, node: Node, now: datetime, known: dict, placed: dict, path: str,
              rejected: list) -> Gpu | None:
    uuid = uuid_normal(entry["uuid"])
    parent = None
    if uuid.startswith("MIG-"):
        parent_uuid = uuid_normal(entry.get("mig_parent_uuid"))
        if placed.get(parent_uuid) == CONTESTED:  # a device of another live node's GPU
            rejected.append({"path": f"{path}.uuid", "why": CONTESTED})
            return None
        parent = known.get(parent_uuid)
        if parent is None:
            rejected.append({"path": f"{path}.mig_parent_uuid",
                             "why": "a MIG device needs its parent GPU listed or known"})
            return None
    try:
        with transaction.atomic():
            return gpu_register(
                node=node, uuid=uuid, model_name=_text(entry.get("name"), 128), at=now,
                parent=parent, index=entry.get("index"),
                pci_bus_id=_text(entry.get("pci_bus_id"), 32),
                memory_total_bytes=entry.get("memory_total_bytes"),
                power_limit_w=entry.get("power_limit_w"),
                # a board's, so a physical GPU's: a MIG device has none of its own
                serial="" if parent else entry.get("serial") or "",
                board_part_number="" if parent else entry.get("board_part_number") or "")
    except IntegrityError:
        # Registered at the same moment by another node's batch: it is that node's now.
        rejected.append({"path": f"{path}.uuid", "why": CONTESTED})
        return None


def _refresh(gpu: Gpu, entry: dict) -> None:
    changed = []
    for name in ("memory_total_bytes", "power_limit_w", "index"):
        value = entry.get(name)
        if value is not None and getattr(gpu, name) != value:
            setattr(gpu, name, value)
            changed.append(name)
    for name in ("serial", "board_part_number") if gpu.parent_id is None else ():
        value = board_text_normalize(entry.get(name))  # an older agent's silence keeps it
        if value and getattr(gpu, name) != value:
            setattr(gpu, name, value)
            changed.append(name)
    if changed:
        gpu.save(update_fields=changed)


_KNOWN_FIELDS = ("uuid", "id", "node_id", "parent_id", "memory_total_bytes", "power_limit_w",
                 "index", "last_seen_at", "serial", "board_part_number")


def gpus_known_ctes(uuids: list[str], *, node_id: int, now: datetime, if_exists: str = ""
                    ) -> tuple[str, list]:
    """Two common table expressions and their parameters: `known`, the registered GPUs
    among `uuids` as `_KNOWN_FIELDS` rows, and `gpus_seen`, those of node `node_id` seen
    at `now` (last_seen_at; only if the table `if_exists` names has a row, when given)."""
    table, quote = Gpu._meta.db_table, connection.ops.quote_name
    at = connection.ops.adapt_datetimefield_value(now)
    guard = f" AND EXISTS (SELECT 1 FROM {if_exists})" if if_exists else ""
    return (f"known AS (SELECT {', '.join(map(quote, _KNOWN_FIELDS))} FROM {table} "
            f"WHERE uuid IN ({', '.join(['%s'] * len(uuids))})), "
            f"gpus_seen AS (UPDATE {table} SET last_seen_at = %s WHERE id IN (SELECT id FROM "
            f"known WHERE node_id = %s AND (last_seen_at IS NULL OR last_seen_at <> %s)){guard})",
            [*uuids, at, node_id, at])


def gpus_known_read(uuids: Iterable[str], *, seen_by: tuple[int, datetime] | None = None
                    ) -> dict[str, tuple]:
    """The registered GPUs among `uuids` as `_KNOWN_FIELDS` rows by UUID, read without model
    instances (every batch asks). With `seen_by` (a node's id, an instant), those of that
    node are seen then (last_seen_at), on PostgreSQL in the same statement: the rows read are
    as they were before."""
    uuids = list(uuids)
    if not uuids:
        return {}
    table, quote = Gpu._meta.db_table, connection.ops.quote_name
    read = (f"SELECT {', '.join(map(quote, _KNOWN_FIELDS))} FROM {table} "
            f"WHERE uuid IN ({', '.join(['%s'] * len(uuids))})")
    with connection.cursor() as cursor:
        if seen_by is None:
            cursor.execute(read, uuids)
            return {row[0]: row for row in cursor.fetchall()}
        ctes, params = gpus_known_ctes(uuids, node_id=seen_by[0], now=seen_by[1])
        if connection.vendor == "postgresql":
            cursor.execute(f"WITH {ctes} SELECT * FROM known", params)
            return {row[0]: row for row in cursor.fetchall()}
        cursor.execute(read, uuids)  # SQLite: an UPDATE in a WITH clause is not allowed
        known = {row[0]: row for row in cursor.fetchall()}
        at = connection.ops.adapt_datetimefield_value(seen_by[1])
        cursor.execute(f"UPDATE {table} SET last_seen_at = %s WHERE node_id = %s AND uuid IN "
                       f"({', '.join(['%s'] * len(uuids))}) AND (last_seen_at IS NULL OR "
                       "last_seen_at <> %s)", [at, seen_by[0], *uuids, at])
        return known


def known_here(*, listed: dict, wanted: set, node: Node, known: dict[str, tuple],
               now: datetime) -> tuple[dict, list[int]] | None:
    """The batch's GpuRefs, and the ids whose last_seen_at is not `now` yet, when every GPU
    it names is registered on this node as it lists it (`known`: `gpus_known_read`'s rows;
    a node's every batch but its first: the common case); else None, for `gpus_place` to
    register, move or refresh them."""
    placed, seen = {}, []
    for uuid in wanted:
        row = known.get(uuid)
        if row is None:
            return None
        _, pk, node_id, parent_id, memory, power, index, last_seen_at, serial, part = row
        entry = listed[uuid][1] if uuid in listed else {}
        if node_id != node.id or any(
                entry.get(name) is not None and entry[name] != stored
                for name, stored in (("memory_total_bytes", memory), ("power_limit_w", power),
                                     ("index", index))) or (parent_id is None and any(
                (value := board_text_normalize(entry.get(name))) and value != stored
                for name, stored in (("serial", serial), ("board_part_number", part)))):
            return None  # `_refresh` stores what changed (a board's serial included)
        placed[uuid] = GpuRef(id=pk, physical_id=parent_id or pk, memory_total_bytes=memory,
                              power_limit_w=power)
        if last_seen_at != now:
            seen.append(pk)
    return placed, seen


def gpus_seen_mark(*, ids: list[int], now: datetime) -> None:
    """last_seen_at = now for these GPUs (one statement)."""
    if ids:
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {Gpu._meta.db_table} SET last_seen_at = %s WHERE id IN "
                           f"({', '.join(['%s'] * len(ids))})",
                           [connection.ops.adapt_datetimefield_value(now), *ids])


def gpus_listed(body: dict, *, also: Iterable[str] = ()) -> tuple[dict, set, list, list]:
    """The batch's listed GPUs (normalised uuid -> (index, cleaned entry)), every GPU it
    names (`also`: its rows'), and what listing them rejected and nulled."""
    listed: dict[str, tuple[int, dict]] = {}
    rejected: list = []
    nulled: list = []
    for index, entry in enumerate(body.get("gpus") or ()):
        uuid = uuid_normal(entry["uuid"])
        if uuid is None:
            rejected.append({"path": f"gpus[{index}].uuid", "why": "not an NVML GPU/MIG UUID"})
        else:
            listed[uuid] = (index, _gpu_entry_clean(entry, f"gpus[{index}]", nulled))
    wanted = set(listed) | _referenced(body) | {n for n in map(uuid_normal, also) if n}
    wanted |= {n for _, e in listed.values() if (n := uuid_normal(e.get("mig_parent_uuid")))}
    return listed, wanted, rejected, nulled


def gpus_place(*, body: dict, node: Node, now: datetime, rejected: list, nulled: list,
               also: Iterable[str] = (), listing: tuple | None = None,
               known: dict[str, tuple] | None = None) -> dict:
    """Map every GPU the batch names (its records', and `also`: its rows') to a GpuRef this
    node may write, or to why not.

    Registers new listed GPUs, moves silent ones here, refreshes last_seen_at. `listing`
    (`gpus_listed`'s) and `known` (`gpus_known_read`'s with `seen_by` this node and `now`)
    when the caller read them already."""
    listed, wanted, listing_rejected, listing_nulled = listing or gpus_listed(body, also=also)
    rejected += listing_rejected
    nulled += listing_nulled
    # This node's GPUs are seen now whatever follows: the rest marks them too.
    if known is None:
        known = gpus_known_read(wanted, seen_by=(node.pk, now))
    found = known_here(listed=listed, wanted=wanted, node=node, known=known, now=now)
    if found is not None:
        return found[0]
    known = {g.uuid: g for g in Gpu.objects.select_related("node").filter(uuid__in=wanted)}
    placed: dict = {}
    # Physical GPUs first, so a MIG device finds its parent registered.
    for uuid in sorted(wanted, key=lambda u: (u.startswith("MIG-"), u)):
        gpu = known.get(uuid)
        if gpu is None:
            if uuid not in listed:
                continue  # records for it are rejected as unknown
            index, entry = listed[uuid]
            gpu = _register(entry=entry, node=node, now=now, known=known, placed=placed,
                            path=f"gpus[{index}]", rejected=rejected)
            if gpu is None:
                placed[uuid] = CONTESTED
                continue
            known[uuid] = gpu
        elif gpu.node_id != node.id:
            if gpu.parent_id is not None:
                gpu.refresh_from_db()  # its parent may have moved here a moment ago
            if gpu.node_id != node.id and not _claim(gpu=gpu.parent or gpu, node=node, now=now):
                placed[uuid] = CONTESTED
                if uuid in listed:
                    rejected.append({"path": f"gpus[{listed[uuid][0]}].uuid", "why": CONTESTED})
                continue
            gpu.refresh_from_db()
            if uuid in listed:  # judged with the limits its new node reports
                _refresh(gpu, listed[uuid][1])
        elif uuid in listed:
            _refresh(gpu, listed[uuid][1])
        placed[uuid] = GpuRef(id=gpu.id, physical_id=gpu.parent_id or gpu.id,
                              memory_total_bytes=gpu.memory_total_bytes,
                              power_limit_w=gpu.power_limit_w)
    # Every report counts: the 15-minute rule is measured from the last one, to the second.
    seen = [known[u].id for u, ref in placed.items() if type(ref) is GpuRef
            and known[u].last_seen_at != now]
    if seen:
        Gpu.objects.filter(id__in=seen).update(last_seen_at=now)
    return placed

