"""The real GPUs, read through NVML (`pynvml` from nvidia-ml-py), each behind its own error guard.

A field a GPU does not support is null and is not asked again; a lost GPU raises GpuLost for that
GPU alone; any other NVML error nulls that one field and is logged once.
"""

from __future__ import annotations

import ctypes
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from agent.model import (
    BackendEvent,
    BackendNotReady,
    BackendUnavailable,
    GpuInfo,
    GpuLost,
    GpuReading,
)
from agent.model import ProcessReading as Proc

log = logging.getLogger("agent.nvml")

UNSUPPORTED = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound,
               pynvml.NVMLError_ArgumentVersionMismatch)
LOST = (pynvml.NVMLError_GpuIsLost, pynvml.NVMLError_ResetRequired)
EVENT_TYPES = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
SAMPLE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
#: What NVML (and nvidia-smi) print for a board field a consumer board does not carry.
NOT_AVAILABLE = ("", "N/A", "[N/A]", "0")
XID_TEXT = {
    13: "Graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "Preemptive cleanup", 48: "Double-bit ECC error", 63: "Row remapping recorded",
    64: "Row remapping failure", 74: "NVLink error", 79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate", 94: "Contained ECC error",
    95: "Uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
}


@dataclass
class Device:
    """NVML's handle of one GPU or MIG device and what we learnt about it."""

    handle: Any
    uuid: str = ""
    mig_enabled: bool = False  # its processes are read on its MIG devices, not twice
    unsupported: set[str] = field(default_factory=set)
    warned: set[str] = field(default_factory=set)
    last_sample_us: int = 0
    last_process_us: int = 0


def handle_address(handle: Any) -> int | None:
    """The address behind an NVML device handle, to recognise it in event data."""
    return ctypes.cast(handle, ctypes.c_void_p).value


class NvmlBackend:
    """The Backend interface over NVML."""

    def __init__(self, event_wait_ms: int = 1000) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            raise BackendUnavailable(
                "no NVIDIA driver: libnvidia-ml.so.1 was not found (install the driver, "
                "or run with --simulate N to simulate GPUs)") from None
        except pynvml.NVMLError as exc:
            raise BackendNotReady(f"NVML cannot start: {exc}") from None
        self.event_wait_ms = event_wait_ms
        self._events: queue.SimpleQueue[BackendEvent] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._by_address: dict[int | None, str] = {}

    def driver_version(self) -> str | None:
        """The driver version, or None when NVML cannot say."""
        try:
            return pynvml.nvmlSystemGetDriverVersion()
        except pynvml.NVMLError:
            return None

    def discover(self) -> list[GpuInfo]:
        """Every GPU that answers, each followed by its MIG devices; starts the event thread."""
        gpus: list[GpuInfo] = []
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            raise BackendNotReady(f"NVML cannot count the GPUs: {exc}") from None
        for index in range(count):
            try:
                device = Device(pynvml.nvmlDeviceGetHandleByIndex(index))
                gpu = self._info(device, index, None)
            except (pynvml.NVMLError, GpuLost) as exc:
                log.error("event=gpu_unreadable index=%d error=%r", index, str(exc))
                continue
            gpus.append(gpu)
            migs = self._mig_devices(device, gpu.uuid)
            device.mig_enabled = bool(migs)
            gpus.extend(migs)
        if self._thread is None:
            self._start_events([g for g in gpus if g.mig_parent_uuid is None])
        return gpus

    def _info(self, device: Device, index: int, parent: str | None) -> GpuInfo:
        device.uuid = pynvml.nvmlDeviceGetUUID(device.handle)
        memory = self._memory(device)
        pci = self._call(device, "pci", pynvml.nvmlDeviceGetPciInfo)
        limit_mw = self._call(device, "power_limit", pynvml.nvmlDeviceGetEnforcedPowerLimit)
        serial = part = None
        if parent is None:  # a MIG device has no board of its own
            serial = self._board_text(device, "serial", pynvml.nvmlDeviceGetSerial)
            part = self._board_text(device, "part_number", pynvml.nvmlDeviceGetBoardPartNumber)
        return GpuInfo(
            uuid=device.uuid, index=index,
            name=self._call(device, "name", pynvml.nvmlDeviceGetName),
            pci_bus_id=pci.busId if pci is not None else None,
            memory_total_bytes=memory.total if memory is not None else None,
            power_limit_w=limit_mw / 1000 if limit_mw else None,
            mig_parent_uuid=parent, key=device, serial=serial, board_part_number=part)

    def _board_text(self, device: Device, name: str, fn: Callable[..., Any]) -> str | None:
        """A board field (serial, part number), None where the board has none: unsupported,
        printed as "[N/A]" or empty (consumer boards), or not text."""
        try:
            text = self._call(device, name, fn)
        except UnicodeDecodeError:  # pynvml decodes the C string as UTF-8
            return None
        text = text.strip() if isinstance(text, str) else None
        return None if text is None or text.upper() in NOT_AVAILABLE else text[:64]

    def _mig_devices(self, parent: Device, parent_uuid: str) -> list[GpuInfo]:
        mode = self._call(parent, "mig_mode", pynvml.nvmlDeviceGetMigMode)
        if not mode or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            return []
        migs = []
        slots = self._call(parent, "mig_count", pynvml.nvmlDeviceGetMaxMigDeviceCount) or 0
        for slot in range(slots):
            try:
                device = Device(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent.handle, slot))
                migs.append(self._info(device, slot, parent_uuid))
            except pynvml.NVMLError_NotFound:
                continue  # an empty slot
            except (pynvml.NVMLError, GpuLost) as exc:
                log.error("event=mig_unreadable parent=%s slot=%d error=%r", parent_uuid, slot,
                          str(exc))
        return migs

    def read(self, gpu: GpuInfo) -> GpuReading:
        """One poll of one GPU; raises GpuLost when it no longer answers."""
        device: Device = gpu.key
        call = self._call
        rates = call(device, "utilization", pynvml.nvmlDeviceGetUtilizationRates)
        util = self._util_samples(device)
        if not util and rates is not None:
            util = [rates.gpu]  # an empty sample buffer: the instantaneous reading says idle
        memory = self._memory(device)
        power_mw = call(device, "power", pynvml.nvmlDeviceGetPowerUsage)
        ecc = [call(device, f"ecc_{kind}", pynvml.nvmlDeviceGetTotalEccErrors, kind,
                    pynvml.NVML_VOLATILE_ECC)
               for kind in (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)]
        remapped = call(device, "remapped_rows", pynvml.nvmlDeviceGetRemappedRows)
        return GpuReading(
            util_gpu=util,
            util_mem=rates.memory if rates is not None else None,
            memory_used_bytes=memory.used if memory is not None else None,
            power_w=power_mw / 1000 if power_mw is not None else None,
            energy_mj=call(device, "energy", pynvml.nvmlDeviceGetTotalEnergyConsumption),
            temp_c=self._temperature(device),
            clock_event_reasons=call(device, "clock_event_reasons",
                                     pynvml.nvmlDeviceGetCurrentClocksEventReasons),
            ecc_corrected_total=ecc[0], ecc_uncorrected_total=ecc[1],
            remap_pending=bool(remapped[2]) if remapped is not None else None,
            processes=[] if device.mig_enabled else self._processes(device),
        )

    def _call(self, device: Device, name: str, fn: Callable[..., Any], *args: Any,
              not_found: Any = None) -> Any:
        """`fn(handle, *args)`, or None when unsupported or failing; GpuLost when lost.

        `not_found` is what NVML's NotFound means for this call (an empty sample buffer).
        """
        if name in device.unsupported:
            return None
        try:
            return fn(device.handle, *args)
        except LOST:
            raise GpuLost(device.uuid) from None
        except UNSUPPORTED:
            device.unsupported.add(name)  # a capability does not come back: stop asking
        except pynvml.NVMLError as exc:
            if not_found is not None and isinstance(exc, pynvml.NVMLError_NotFound):
                return not_found
            if name not in device.warned:
                device.warned.add(name)
                log.warning("event=nvml_error gpu=%s field=%s error=%r", device.uuid, name,
                            str(exc))
        return None

    def _memory(self, device: Device) -> Any:
        memory = self._call(device, "memory_v2", pynvml.nvmlDeviceGetMemoryInfo,
                            pynvml.nvmlMemory_v2)
        if memory is None and "memory_v2" in device.unsupported:
            memory = self._call(device, "memory", pynvml.nvmlDeviceGetMemoryInfo)
        return memory

    def _temperature(self, device: Device) -> int | None:
        temp = self._call(device, "temperature_v", pynvml.nvmlDeviceGetTemperatureV,
                          pynvml.NVML_TEMPERATURE_GPU)
        if temp is None and "temperature_v" in device.unsupported:
            temp = self._call(device, "temperature", pynvml.nvmlDeviceGetTemperature,
                              pynvml.NVML_TEMPERATURE_GPU)
        return temp

    def _util_samples(self, device: Device) -> list[float] | None:
        result = self._call(device, "samples", pynvml.nvmlDeviceGetSamples,
                            pynvml.NVML_GPU_UTILIZATION_SAMPLES, device.last_sample_us,
                            not_found=(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, []))
        if result is None:
            return None
        value_type, samples = result
        fresh = [s for s in samples if s.timeStamp > device.last_sample_us]
        if fresh:
            device.last_sample_us = max(s.timeStamp for s in fresh)
        key = SAMPLE_FIELDS[value_type]
        return [getattr(s.sampleValue, key) for s in fresh]

    def _processes(self, device: Device) -> list[Proc]:
        running = self._call(device, "processes", pynvml.nvmlDeviceGetComputeRunningProcesses)
        if not running:
            return []
        util_by_pid: dict[int, list[float]] | None = None
        samples = self._call(device, "process_util", pynvml.nvmlDeviceGetProcessUtilization,
                             device.last_process_us, not_found=[])
        if samples is not None:
            util_by_pid = {}
            for s in samples:
                if s.timeStamp > device.last_process_us:
                    util_by_pid.setdefault(s.pid, []).append(s.smUtil)
            device.last_process_us = max([device.last_process_us, *(s.timeStamp for s in samples)])
        return [Proc(pid=p.pid, memory_used_bytes=p.usedGpuMemory,
                     util_sm=None if util_by_pid is None else util_by_pid.get(p.pid, []))
                for p in running]

    def _start_events(self, gpus: list[GpuInfo]) -> None:
        try:
            self._event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            log.warning("event=no_nvml_events error=%r", str(exc))
            return
        for gpu in gpus:
            try:
                # Registering a type the GPU lacks fails the whole mask: ask for what it has.
                types = EVENT_TYPES & pynvml.nvmlDeviceGetSupportedEventTypes(gpu.key.handle)
                pynvml.nvmlDeviceRegisterEvents(gpu.key.handle, types, self._event_set)
                self._by_address[handle_address(gpu.key.handle)] = gpu.uuid
            except pynvml.NVMLError as exc:
                log.warning("event=no_xid_events gpu=%s error=%r", gpu.uuid, str(exc))
        self._thread = threading.Thread(target=self._event_loop, name="nvml-events", daemon=True)
        self._thread.start()

    def _event_loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, self.event_wait_ms)
            except pynvml.NVMLError_Timeout:
                continue
            except pynvml.NVMLError as exc:
                log.warning("event=nvml_event_wait_failed error=%r", str(exc))
                self._stop.wait(self.event_wait_ms / 1000)
                continue
            uuid = self._by_address.get(handle_address(data.device))
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                xid = int(data.eventData)
                self._events.put(BackendEvent(uuid, "xid", time.time(), xid, XID_TEXT.get(xid)))
            if data.eventType & pynvml.nvmlEventTypeDoubleBitEccError:
                self._events.put(BackendEvent(uuid, "ecc_uncorrected", time.time(),
                                              detail="double-bit ECC error"))

    def drain_events(self) -> list[BackendEvent]:
        """The XID and ECC events the event thread received since the last call."""
        events = []
        while not self._events.empty():
            events.append(self._events.get())
        return events

    def close(self) -> None:
        """Stop the event thread and shut NVML down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.event_wait_ms / 1000 + 1)
        try:
            if self._event_set is not None:
                pynvml.nvmlEventSetFree(self._event_set)
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            log.warning("event=nvml_shutdown_failed error=%r", str(exc))
