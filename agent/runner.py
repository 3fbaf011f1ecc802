"""The sampling loop: poll every GPU, aggregate into aligned windows, spool one batch per window."""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from agent import __version__
from agent.batch import batch_record, event_record, gpu_record, job_record, node_record
from agent.batch import sample_record as make_sample
from agent.model import Backend, BackendNotReady, GpuInfo, GpuLost, GpuReading
from agent.owners import OwnerResolver
from agent.spool import Spool
from agent.validate import UUID_RE, clean_process, clean_sample, process_is_valid
from agent.windows import (
    GpuAccumulator,
    ProcessWindow,
    check_window_s,
    round_half_up,
    window_end_after,
)

log = logging.getLogger("agent")

SKEW_TOLERANCE_S = 2.0  # wall clock and monotonic clock may drift this far between two polls


class Clock:
    """Wall time for windows, monotonic time to notice wall-clock jumps; tests inject a fake."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, seconds: float, stop: threading.Event) -> bool:
        """Sleep up to `seconds`; True when `stop` was set."""
        return stop.wait(max(0.0, seconds))


class Agent:
    """Owns the per-GPU accumulators and turns each closed window into a spooled batch."""

    def __init__(self, *, backend: Backend | None, spool: Spool, owners: OwnerResolver,
                 hostname: str, boot_id: str | None, window_s: int = 60, poll_s: float = 10.0,
                 clock: Clock | None = None, on_spooled: Callable[[], None] = lambda: None,
                 connect: Callable[[], Backend] | None = None, retry_s: float = 60.0) -> None:
        """`backend` None: NVML was not ready; `connect` starts it, tried every `retry_s`
        (also how often GPUs that stopped answering are looked for again)."""
        check_window_s(window_s)
        if backend is None and connect is None:
            raise ValueError("an agent needs a backend, or a way to connect one")
        self.backend, self.spool, self.owners = backend, spool, owners
        self.connect, self.retry_s = connect, retry_s
        self.retry_at = 0.0
        self.nvml_down = False
        self.lost_retry_at = 0.0
        self.hostname, self.boot_id = hostname, boot_id
        self.window_s, self.poll_s = window_s, min(poll_s, window_s)
        self.clock = clock or Clock()
        self.on_spooled = on_spooled
        self.instance_id = str(uuid.uuid4())
        self.seq = 0
        self.dropped_records_total = 0
        self.gpus: list[GpuInfo] = []
        self.acc: dict[str, GpuAccumulator] = {}
        self.lost: set[str] = set()
        self.remap_pending: set[str] = set()
        self.events: list[dict[str, Any]] = []
        self.driver_version: str | None = None

    def start(self) -> None:
        """Inventory the GPUs, note the restart, and take every counter's starting value
        (NVML not ready: say so, and try again from `poll`)."""
        if self.backend is None:
            self._connect()
        else:
            self._discover()
        self.event("agent_restart", None, detail=f"instance {self.instance_id}, "
                   f"{len(self.gpus)} GPUs, driver {self.driver_version}")
        log.info("event=agent_started instance=%s gpus=%d driver=%s window_s=%d poll_s=%s",
                 self.instance_id, len(self.gpus), self.driver_version, self.window_s,
                 self.poll_s)
        self._prime()

    def _discover(self) -> None:
        self.driver_version = self.backend.driver_version()
        self.gpus = [g for g in self.backend.discover() if self._valid_uuid(g)]
        self.acc = {g.uuid: GpuAccumulator() for g in self.gpus}

    def _prime(self) -> None:
        for gpu in self._live_gpus():
            reading = self._read(gpu)
            if reading is not None:
                self.acc[gpu.uuid].prime(reading)

    def _connect(self) -> bool:
        """Start NVML. While it cannot answer, the batches are heartbeats with no GPUs and
        one `nvml_unavailable` event per outage; True once it answers."""
        try:
            self.backend = self.connect()
            self._discover()
        except BackendNotReady as exc:
            if self.backend is not None:
                self.backend.close()
            self.backend, self.gpus, self.acc = None, [], {}
            self.retry_at = self.clock.monotonic() + self.retry_s
            if not self.nvml_down:
                self.nvml_down = True
                self.event("nvml_unavailable", None, detail=str(exc))
                log.error("event=nvml_unavailable retry_s=%s error=%r", self.retry_s, str(exc))
            return False
        if self.nvml_down:
            self.nvml_down = False
            log.warning("event=nvml_available gpus=%d driver=%s", len(self.gpus),
                        self.driver_version)
        return True

    def event(self, event_type: str, gpu_uuid: str | None, **fields: Any) -> None:
        """Queue an event for the next batch."""
        self.events.append(event_record(event_type, gpu_uuid, self.clock.now(), **fields))

    def poll(self) -> None:
        """Read every live GPU once; a failure of one GPU never stops the others."""
        if self.backend is None:
            if self.clock.monotonic() < self.retry_at or not self._connect():
                return
            self._prime()
        if self.lost and self.clock.monotonic() >= self.lost_retry_at:
            self._find_lost()
        live: set[tuple[int, int]] = set()
        for gpu in self._live_gpus():
            reading = self._read(gpu)
            if reading is None:
                continue
            for counter in self.acc[gpu.uuid].add(reading):
                self.event("counter_reset", gpu.uuid, detail=f"{counter} counter went backwards")
            self._note_remap(gpu, bool(reading.remap_pending))
            live |= self._add_processes(gpu, reading)
        self.owners.forget_except(live)
        for ev in self.backend.drain_events():
            self.events.append(event_record(ev.type, ev.gpu_uuid, ev.ts, xid=ev.xid,
                                            detail=ev.detail))

    def _find_lost(self) -> None:
        """Look for the lost GPUs again (a reset brings one back without a reboot): one that
        answers is read from then on, its counters taken anew."""
        self.lost_retry_at = self.clock.monotonic() + self.retry_s
        try:
            fresh = {g.uuid: g for g in self.backend.discover()}
        except Exception as exc:  # noqa: BLE001 - the GPUs still answering go on
            log.warning("event=rediscover_failed error=%r", str(exc))
            return
        for index, gpu in enumerate(self.gpus):
            back = fresh.get(gpu.uuid)
            if gpu.uuid not in self.lost or back is None:
                continue
            try:
                reading = self.backend.read(back)
            except Exception:  # noqa: BLE001 - still lost: try again later
                continue
            self.gpus[index] = back
            self.lost.discard(back.uuid)
            self.acc[back.uuid] = GpuAccumulator()
            self.acc[back.uuid].prime(reading)
            log.warning("event=gpu_back gpu=%s index=%d", back.uuid, back.index)

    def _note_remap(self, gpu: GpuInfo, pending: bool) -> None:
        """One `remap_pending` event when the GPU starts needing a reset, not one per poll."""
        if pending and gpu.uuid not in self.remap_pending:
            self.event("remap_pending", gpu.uuid, detail="row remapping pending a reset")
        (self.remap_pending.add if pending else self.remap_pending.discard)(gpu.uuid)

    def _add_processes(self, gpu: GpuInfo, reading: GpuReading) -> set[tuple[int, int]]:
        """Fold the reading's processes, with their owners, into the window; their keys."""
        keys = set()
        for proc in reading.processes:
            pid_start = (proc.pid_start if proc.pid_start is not None
                         else self.owners.pid_start(proc.pid))
            if pid_start is None:
                continue  # exited between NVML's answer and our look at /proc
            command, owner = proc.command, proc.owner
            if owner is None:
                command, owner = self.owners.lookup(proc.pid, pid_start, gpu.index)
            keys.add((proc.pid, pid_start))
            self.acc[gpu.uuid].add_process((proc.pid, pid_start), command, owner,
                                           proc.memory_used_bytes, proc.util_sm)
        return keys

    def _read(self, gpu: GpuInfo) -> GpuReading | None:
        try:
            return self.backend.read(gpu)
        except GpuLost:
            self.lost.add(gpu.uuid)
            self.lost_retry_at = self.clock.monotonic() + self.retry_s
            self.event("gpu_lost", gpu.uuid, detail="GPU stopped answering NVML")
            log.error("event=gpu_lost gpu=%s index=%d", gpu.uuid, gpu.index)
        except Exception as exc:  # one GPU's surprise must not cost the others' data
            log.warning("event=gpu_read_failed gpu=%s error=%r", gpu.uuid, repr(exc))
        return None

    def close_window(self, start: int, end: int) -> dict[str, Any]:
        """Turn the window [start, end) into a validated batch, spool it, and return it."""
        samples, processes = [], []
        for gpu in self.gpus:
            window, deltas = self.acc[gpu.uuid].take()
            if gpu.uuid in self.lost and not window.readings:
                continue
            sample = make_sample(gpu, window, deltas, start, end)
            nulled = clean_sample(sample, memory_total_bytes=gpu.memory_total_bytes,
                                  power_limit_w=gpu.power_limit_w, window_s=end - start)
            if nulled:
                log.warning("event=sample_nulled gpu=%s window_start=%s fields=%s", gpu.uuid,
                            sample["window_start"], ",".join(nulled))
            self.seq += 1
            samples.append({"seq": self.seq, **sample})
            for proc in window.processes.values():
                record = self._process_record(gpu, proc, sample)
                if process_is_valid(record):
                    clean_process(record)
                    processes.append(record)
        if not samples:
            self.seq += 1  # a heartbeat still takes a place in the sequence
        batch = batch_record(
            instance_id=self.instance_id, seq_first=samples[0]["seq"] if samples else self.seq,
            seq_last=self.seq, node=self._node(), gpus=[gpu_record(g) for g in self.gpus],
            samples=samples, processes=processes, events=self.events, sent_at=self.clock.now())
        self.events = []
        dropped = self.spool.put(batch)
        if dropped.batches:
            self.dropped_records_total += dropped.records
            self.event("data_dropped", None, detail=(
                f"spool cap: dropped {dropped.batches} batches ({dropped.samples} samples, "
                f"{dropped.processes} processes, {dropped.events} events)"))
        log.info("event=window_closed window_start=%d window_end=%d samples=%d processes=%d "
                 "events=%d", start, end, len(samples), len(processes), len(batch["events"]))
        self.on_spooled()
        return batch

    def run(self, stop: threading.Event, *, once: bool = False) -> None:
        """Sample aligned windows until `stop` is set (or one window with `once`)."""
        self.start()
        clock = self.clock
        wall, mono = clock.now(), clock.monotonic()
        start, end = math.floor(wall), window_end_after(wall, self.window_s)
        while True:
            target = min(end, (math.floor(clock.now() / self.poll_s) + 1) * self.poll_s)
            if clock.wait(target - clock.now(), stop):
                break
            now, now_mono = clock.now(), clock.monotonic()
            skew = (now - wall) - (now_mono - mono)
            wall, mono = now, now_mono
            if abs(skew) > SKEW_TOLERANCE_S or now > end + self.window_s:
                self._restart_windows(now, skew)
                start, end = math.floor(now), window_end_after(now, self.window_s)
                continue
            self.poll()
            if target >= end:
                self.close_window(start, end)
                if once:
                    return
                start, end = end, end + self.window_s
        # Stopping mid-window: keep what was measured as a shorter window (whole seconds).
        stop_at = math.floor(clock.now())
        if stop_at > start and any(a.window.readings for a in self.acc.values()):
            self.close_window(start, min(stop_at, end))

    def _restart_windows(self, now: float, skew: float) -> None:
        """After a clock jump or a long stall the current window cannot be placed: start anew."""
        if abs(skew) > SKEW_TOLERANCE_S:
            self.event("clock_skew", None, detail=f"wall clock jumped by {skew:+.1f} s")
        log.warning("event=windows_restarted at=%d skew_s=%.1f", now, skew)
        for gpu in self._live_gpus():
            self.acc[gpu.uuid].take()
            reading = self._read(gpu)
            if reading is not None:
                self.acc[gpu.uuid].prime(reading)

    def _node(self) -> dict[str, Any]:
        return node_record(hostname=self.hostname, driver_version=self.driver_version,
                           boot_id=self.boot_id, **self.node_status())

    def node_status(self) -> dict[str, int | str]:
        """The node fields that change between spooling and sending: the sender's version
        among them, so batches spooled before an upgrade go out as the new agent's."""
        return {"spool_backlog": len(self.spool.pending()),
                "dropped_records_total": self.dropped_records_total,
                "agent_version": __version__}

    def _live_gpus(self) -> list[GpuInfo]:
        return [g for g in self.gpus if g.uuid not in self.lost]

    @staticmethod
    def _valid_uuid(gpu: GpuInfo) -> bool:
        if UUID_RE.match(gpu.uuid):
            return True
        log.error("event=gpu_skipped uuid=%r reason=not_an_nvml_uuid", gpu.uuid)
        return False

    @staticmethod
    def _process_record(gpu: GpuInfo, proc: ProcessWindow,
                        sample: dict[str, Any]) -> dict[str, Any]:
        owner = proc.owner
        return {"gpu_uuid": gpu.uuid, "window_start": sample["window_start"],
                "window_end": sample["window_end"], "pid": proc.pid, "pid_start": proc.pid_start,
                "uid": owner.uid if owner else None, "user": owner.user if owner else None,
                "command": proc.command, "job": job_record(owner),
                "memory_used_bytes_max": proc.memory_max,
                "util_sm_avg": round_half_up(proc.util_sm.avg()) if proc.util_sm_supported
                else None}

