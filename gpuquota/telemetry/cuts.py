"""A node's reports cut into the bodies of its batches: by boot, within the protocol's
per-batch limits."""

from gpuquota.ingest import conf as ingest_conf
from gpuquota.ingest.rows import Rows
from gpuquota.telemetry.normalise import GpuReport


def reports_cut(reports: list[GpuReport]) -> dict[str, list[dict]]:
    """The reports' records by boot, cut into bodies within the protocol's per-batch
    limits (their samples and processes as `Rows`); a sample and its process records
    stay in one body."""
    bodies: dict[str, list[dict]] = {}

    def body_for(boot: str, samples: int, processes: int, events: int) -> dict:
        parts = bodies.setdefault(boot, [])
        if not parts or len(parts[-1]["rows"].samples) + samples > ingest_conf.MAX_SAMPLES or \
                len(parts[-1]["rows"].processes) + processes > ingest_conf.MAX_PROCESSES or \
                len(parts[-1]["events"]) + events > ingest_conf.MAX_EVENTS:
            parts.append({"gpus": {}, "rows": Rows(), "events": []})
        return parts[-1]

    entries = {r.uuid: r.entry() for r in reports}
    for report in reports:
        gpus = {report.uuid: entries[report.uuid]}
        if report.parent_uuid in entries:
            gpus[report.parent_uuid] = entries[report.parent_uuid]
        if _whole_into(bodies, report.units, gpus, body_for):
            units = ()
        else:
            units = report.units
        boot, rows = None, Rows()
        for unit in units:
            # the body of the unit's boot while it has room (a report's units share a boot
            # until its GPU is lost, so the look-up is rarely needed)
            if boot != unit.boot or \
                    len(rows.samples) >= ingest_conf.MAX_SAMPLES or \
                    len(rows.processes) + len(unit.processes) > ingest_conf.MAX_PROCESSES:
                boot = unit.boot
                body = body_for(boot, 1, len(unit.processes), 0)
                body["gpus"].update(gpus)
                rows = body["rows"]
            rows.samples.append(unit.sample)
            if unit.processes:
                rows.processes.extend(unit.processes)
        for event, boot in report.event_boots:
            body = body_for(boot, 0, 0, 1)
            body["events"].append(event)
            body["gpus"][report.uuid] = entries[report.uuid]
    return bodies


def _room(part: dict, samples: int, processes: int) -> bool:
    return (len(part["rows"].samples) + samples <= ingest_conf.MAX_SAMPLES
            and len(part["rows"].processes) + processes <= ingest_conf.MAX_PROCESSES)


def _whole_into(bodies: dict, units: list, gpus: dict, body_for) -> bool:
    """Put a report's units into one body at once where `reports_cut`' unit-by-unit cut would
    put them all there: one boot, and room for all of them in the body its first unit
    goes to (the boot's last, or a new one). False: cut them unit by unit."""
    if not units or any(unit.boot != units[0].boot for unit in units):
        return False
    processes = [p for unit in units for p in unit.processes]
    parts = bodies.get(units[0].boot)
    if not (parts and _room(parts[-1], len(units), len(processes))):
        first_fits = parts and _room(parts[-1], 1, len(units[0].processes))
        if first_fits or len(units) > ingest_conf.MAX_SAMPLES or \
                len(processes) > ingest_conf.MAX_PROCESSES:
            return False
    body = body_for(units[0].boot, 1, len(units[0].processes), 0)
    body["gpus"].update(gpus)
    body["rows"].samples += [unit.sample for unit in units]
    body["rows"].processes += processes
    return True
