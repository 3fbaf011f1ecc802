"""A GPU's health as dcgm-exporter shows it, turned into the agent protocol's events so
the accounting's health rules (accounting.md, "Inventory and health") apply unchanged.
This is the one place that maps the exporter's health fields:

- `DCGM_FI_DEV_XID_ERRORS` (the last XID, never reset) taking another value > 0: an
  `xid` event with that value, when first read (after a loss: at the loss);
- `DCGM_EXP_XID_ERRORS_COUNT{xid=N}` growing: `xid` N;
- `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL` growing: `ecc_uncorrected` (and the sample's
  `ecc_uncorrected`, which fails the GPU);
- `DCGM_FI_DEV_ROW_REMAP_PENDING` turning 1: `remap_pending`;
- `DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS` growing (default fields): `remap_pending`, a
  row remapped for an uncorrectable error takes effect at the next reset;
- `DCGM_FI_DEV_ROW_REMAP_FAILURE` turning 1 (default fields): `xid` 64, the driver's XID
  for a failed remapping;
- the GPU's series vanishing while other GPUs of its node report: `gpu_lost`, at the end
  of its last sample;
- `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` going back: `counter_reset`.

Boots: the agent sends its node's boot id, and a failed GPU recovers at its first good
sample under another boot. An exporter has no boot id, so the importer names the GPU's
*life*: a lost GPU that reports again starts a new life (`life_boot`), and its first
sample ends the failure, as a reboot would for the agent. A GPU that is merely missing
with its whole node (the exporter or Prometheus down) keeps its life: no data, no event.
"""

import uuid
from dataclasses import dataclass, field

from gpuquota.ingest.parsing import instant_text as iso

EVENT_NAMESPACE = uuid.UUID("2b8f7c1e-9d4a-4f3b-8e61-5a0c7d2e9f14")
BOOT_NAMESPACE = uuid.UUID("7e2d4b90-1c3a-4f5e-8b6d-0a9c2e4f6b13")
REMAP_FAILURE_XID = 64


def life_boot(gpu_uuid: str, lost_at: int | None) -> str:
    """The boot id of a GPU's life since it was lost at `lost_at`; None: its first life,
    one id for every GPU (so a node's GPUs share their batches until one is lost)."""
    if lost_at is None:
        return "exporter-first-life"
    return f"exporter-{uuid.uuid5(BOOT_NAMESPACE, f'{gpu_uuid}|{lost_at}')}"


@dataclass
class GpuState:
    """What was known of a GPU before the windows being read: the life it is in, whether
    it is lost (since when, under which life), and the last XID value read."""

    boot_id: str
    lost_at: int | None = None
    xid: int | None = None


@dataclass
class GpuTimeline:
    """One physical GPU over the windows read (one before the range and one after, for
    edges and changes): its device-level figures, when it reported and when its node did."""

    gpu_uuid: str
    device: dict  # figure name -> {window start: value}
    xid_counts: list  # [(xid, {window start: value})]
    present: set  # windows with any usable reading of this GPU
    mates_present: set  # windows in which another GPU of its node has a reading
    starts: dict  # window start -> where its sample starts (a GPU appearing mid-window)
    ends: dict  # window start -> where its sample ends (a GPU vanishing mid-window)


@dataclass
class HealthResult:
    events: list = field(default_factory=list)  # [(event record, boot id)]
    boots: dict = field(default_factory=dict)  # window start -> boot id of its records


def event_record(gpu_uuid: str, ts: int, kind: str, *, xid: int | None = None,
                 detail: str | None = None) -> dict:
    """An event with an id made of what it is: importing again repeats none."""
    key = f"{gpu_uuid}|{kind}|{ts}|{'' if xid is None else xid}"
    record = {"event_id": str(uuid.uuid5(EVENT_NAMESPACE, key)), "gpu_uuid": gpu_uuid,
              "ts": iso(ts), "type": kind}
    if xid is not None:
        record["xid"] = xid
    if detail:
        record["detail"] = detail
    return record


def _grew(series: dict, ws: int, window_s: int) -> bool:
    now, before = series.get(ws), series.get(ws - window_s)
    return now is not None and before is not None and now > before


def _turned_on(series: dict, ws: int, window_s: int) -> bool:
    return (series.get(ws) or 0) >= 1 and (series.get(ws - window_s) or 0) < 1 \
        and (ws - window_s) in series


def _health_counter_events(gpu: GpuTimeline, ws: int, at: int, window_s: int) -> list:
    """XID counts, ECC and row remapping (of a GPU that has any, `_counters_kept`)."""
    device, found = gpu.device, []
    for number, counts in gpu.xid_counts:
        if _grew(counts, ws, window_s):
            found.append(event_record(gpu.gpu_uuid, at, "xid", xid=number))
    if _grew(device["dbe_last"], ws, window_s):
        found.append(event_record(gpu.gpu_uuid, at, "ecc_uncorrected"))
    if _turned_on(device["remap_max"], ws, window_s):
        found.append(event_record(gpu.gpu_uuid, at, "remap_pending"))
    elif _grew(device["unc_remapped_last"], ws, window_s):
        found.append(event_record(gpu.gpu_uuid, at, "remap_pending",
                                  detail="a row remapped for an uncorrectable error"))
    if _turned_on(device["remap_failure_max"], ws, window_s):
        found.append(event_record(gpu.gpu_uuid, at, "xid", xid=REMAP_FAILURE_XID,
                                  detail="row remapping failed (DCGM_FI_DEV_ROW_REMAP_FAILURE)"))
    return found


def _counters_kept(gpu: GpuTimeline) -> bool:
    """Whether the GPU has any of the XID-count, ECC or row-remap fields (most exporters
    have none: then they are not looked at window by window)."""
    device = gpu.device
    return bool(gpu.xid_counts or device["dbe_last"] or device["remap_max"]
                or device["unc_remapped_last"] or device["remap_failure_max"])


def _energy_resets(gpu: GpuTimeline, window_s: int) -> set:
    """The windows in which the energy counter was reset (Prometheus counted a reset, or
    it went back from the window before)."""
    device = gpu.device
    energy = device["energy_last"]
    found = {ws for ws, value in energy.items()
             if (before := energy.get(ws - window_s)) is not None and value < before}
    return found | {ws for ws, count in device["energy_resets"].items() if (count or 0) > 0}


def health_walk(gpu: GpuTimeline, state: GpuState, *, windows: range,
                window_s: int) -> HealthResult:
    """The events of the windows in `windows` and the boot of each, from the state before
    them; `state` is left as it stands after them."""
    result = HealthResult()
    xids = gpu.device["xid_last"]
    counters, resets = _counters_kept(gpu), _energy_resets(gpu, window_s)
    if state.xid is None:
        state.xid = _int(xids.get(windows.start - window_s))
    for ws in windows:
        if ws not in gpu.present:
            seen_before = (ws - window_s) in gpu.present
            if state.lost_at is None and ws in gpu.mates_present and seen_before:
                state.lost_at = gpu.ends.get(ws - window_s, ws)
                result.events.append((event_record(
                    gpu.gpu_uuid, state.lost_at, "gpu_lost",
                    detail="its series vanished while its node's other GPUs reported"),
                    state.boot_id))
            continue
        value = _int(xids.get(ws))
        if state.lost_at is not None:  # back: a new life, and what it says happened
            if value and value != state.xid:
                result.events.append((event_record(gpu.gpu_uuid, state.lost_at, "xid",
                                                   xid=value), state.boot_id))
                state.xid = value
            state.boot_id = life_boot(gpu.gpu_uuid, state.lost_at)
            state.lost_at = None
        at = gpu.starts.get(ws, ws)
        if value is not None:
            if value and state.xid is not None and value != state.xid:
                result.events.append((event_record(gpu.gpu_uuid, at, "xid", xid=value),
                                      state.boot_id))
            state.xid = value
        if counters:
            result.events.extend((event, state.boot_id)
                                 for event in _health_counter_events(gpu, ws, at, window_s))
        if ws in resets:
            result.events.append((event_record(gpu.gpu_uuid, ws, "counter_reset"),
                                  state.boot_id))
        result.boots[ws] = state.boot_id
    return result


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
