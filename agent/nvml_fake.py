"""A fake libnvidia-ml for `pynvml`: Python stand-ins for NVML's C entry points.

Installed as `pynvml.nvmlLib`, it lets pynvml's own wrapper code run unchanged (structures,
two-call size negotiation, error classes), so the NVML backend is tested and benchmarked on
machines without a GPU. The stand-ins take the ctypes arguments pynvml passes and write their
answers through them, as the C library would.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pynvml

OK = pynvml.NVML_SUCCESS


@dataclass
class FakeGpu:
    """The state one fake GPU (or MIG device) reports; tests change it between polls."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = "00000000:3B:00.0"
    serial: str = "1654923012345"  # a data-center board's; "[N/A]" or "" on consumer boards
    board_part_number: str = "692-2G520-0200-000"
    memory_total: int = 85520809984
    memory_used: int = 0
    power_limit_mw: int = 700000
    power_mw: int = 70000
    energy_mj: int = 5_000_000
    temp_c: int = 35
    util_gpu: int = 0  # the instantaneous reading (nvmlDeviceGetUtilizationRates)
    util_mem: int = 0
    samples: list[tuple[int, int]] = field(default_factory=list)  # (timestamp in µs, percent)
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, memory bytes)
    process_util: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, µs, sm %)
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    clock_event_reasons: int = 0
    remap_pending: int = 0
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)  # C functions answering NOT_SUPPORTED
    mig: list[FakeGpu] = field(default_factory=list)  # non-empty: MIG mode is enabled
    clock_us: int = 1_000_000

    def advance(self, seconds: int, util: int) -> None:
        """Let `seconds` pass at `util` percent: one utilization sample a second, energy used."""
        for _ in range(seconds):
            self.clock_us += 1_000_000
            self.samples.append((self.clock_us, util))
            for pid, _memory in self.processes:
                self.process_util.append((pid, self.clock_us, util))
        del self.samples[:-100]  # NVML's ring buffer is bounded too
        del self.process_util[:-100]
        self.util_gpu = util
        self.energy_mj += self.power_mw * seconds


class CFunction:
    """A stand-in C function; accepts the attributes pynvml sets on ctypes functions."""

    def __init__(self, fn: Callable[..., int]) -> None:
        self.fn = fn
        self.calls = 0

    def __call__(self, *args: Any) -> int:
        self.calls += 1
        return self.fn(*args)


def _out(arg: Any) -> Any:
    """The ctypes object behind `byref(obj)`."""
    return arg._obj


def _value(arg: Any) -> Any:
    return arg.value if hasattr(arg, "value") else arg


class FakeNvmlLib:
    """The C entry points pynvml looks up, over a list of FakeGpu; the rest are missing."""

    def __init__(self, gpus: list[FakeGpu], driver_version: str = "580.65.06",
                 init_error: int = OK, missing: tuple[str, ...] = ()) -> None:
        self.gpus, self.driver_version, self.init_error = gpus, driver_version, init_error
        self._by_address: dict[int, FakeGpu] = {}
        self._address: dict[str, int] = {}
        for gpu in gpus:
            for device in (gpu, *gpu.mig):
                self._address[device.uuid] = 0x1000 + 0x10 * len(self._address)
                self._by_address[self._address[device.uuid]] = device
        self._events: list[tuple[str, int, int]] = []
        self._event_ready = threading.Condition()
        # Only the entry points set here exist: pynvml turns any other into FunctionNotFound.
        for name in dir(self):
            if name.startswith("c_nvml") and name[2:] not in missing:
                setattr(self, name[2:], CFunction(getattr(self, name)))

    def raise_event(self, uuid: str, event_type: int, data: int) -> None:
        """Queue an NVML event (an XID, an ECC error) for the agent's event thread."""
        with self._event_ready:
            self._events.append((uuid, event_type, data))
            self._event_ready.notify_all()

    def _set_handle(self, arg: Any, device: FakeGpu) -> None:
        ctypes.c_void_p.from_buffer(_out(arg)).value = self._address[device.uuid]

    def _device(self, handle: Any, fn_name: str) -> FakeGpu | int:
        device = self._by_address[ctypes.cast(handle, ctypes.c_void_p).value]
        if device.lost:
            return pynvml.NVML_ERROR_GPU_IS_LOST
        if fn_name in device.unsupported:
            return pynvml.NVML_ERROR_NOT_SUPPORTED
        return device

    def _query(self, name: str, handle: Any, answer: Callable[[FakeGpu], int | None]) -> int:
        device = self._device(handle, name)
        if isinstance(device, int):
            return device
        return answer(device) or OK

    # Library-level entry points.
    def c_nvmlInitWithFlags(self, flags: int) -> int:
        return self.init_error

    def c_nvmlShutdown(self) -> int:
        return OK

    def c_nvmlErrorString(self, code: int) -> bytes:
        return f"fake NVML error {code}".encode()

    def c_nvmlSystemGetDriverVersion(self, buf: Any, size: Any) -> int:
        buf.value = self.driver_version.encode()
        return OK

    def c_nvmlDeviceGetCount_v2(self, count: Any) -> int:
        _out(count).value = len(self.gpus)
        return OK

    def c_nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        self._set_handle(device, self.gpus[index.value])
        return OK

    # Inventory.
    def c_nvmlDeviceGetUUID(self, h: Any, buf: Any, size: Any) -> int:
        return self._query("nvmlDeviceGetUUID", h, lambda d: setattr(buf, "value", d.uuid.encode()))

    def c_nvmlDeviceGetName(self, h: Any, buf: Any, size: Any) -> int:
        return self._query("nvmlDeviceGetName", h, lambda d: setattr(buf, "value", d.name.encode()))

    def c_nvmlDeviceGetSerial(self, h: Any, buf: Any, size: Any) -> int:
        return self._query("nvmlDeviceGetSerial", h,
                           lambda d: setattr(buf, "value", d.serial.encode()))

    def c_nvmlDeviceGetBoardPartNumber(self, h: Any, buf: Any, size: Any) -> int:
        return self._query("nvmlDeviceGetBoardPartNumber", h,
                           lambda d: setattr(buf, "value", d.board_part_number.encode()))

    def c_nvmlDeviceGetPciInfo_v3(self, h: Any, info: Any) -> int:
        return self._query("nvmlDeviceGetPciInfo_v3", h,
                           lambda d: setattr(_out(info), "busId", d.pci_bus_id.encode()))

    def c_nvmlDeviceGetEnforcedPowerLimit(self, h: Any, out: Any) -> int:
        return self._query("nvmlDeviceGetEnforcedPowerLimit", h,
                           lambda d: setattr(_out(out), "value", d.power_limit_mw))

    def c_nvmlDeviceGetMigMode(self, h: Any, current: Any, pending: Any) -> int:
        def answer(d: FakeGpu) -> None:
            _out(current).value = _out(pending).value = int(bool(d.mig))
        return self._query("nvmlDeviceGetMigMode", h, answer)

    def c_nvmlDeviceGetMaxMigDeviceCount(self, h: Any, out: Any) -> int:
        return self._query("nvmlDeviceGetMaxMigDeviceCount", h,
                           lambda d: setattr(_out(out), "value", 7 if d.mig else 0))

    def c_nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, index: Any, out: Any) -> int:
        def answer(d: FakeGpu) -> int:
            if index.value >= len(d.mig):
                return pynvml.NVML_ERROR_NOT_FOUND
            self._set_handle(out, d.mig[index.value])
            return OK
        return self._query("nvmlDeviceGetMigDeviceHandleByIndex", h, answer)

    # Readings.
    def _memory(self, name: str, h: Any, out: Any) -> int:
        def answer(d: FakeGpu) -> None:
            memory = _out(out)
            memory.total, memory.used = d.memory_total, d.memory_used
            memory.free = d.memory_total - d.memory_used
        return self._query(name, h, answer)

    def c_nvmlDeviceGetMemoryInfo_v2(self, h: Any, out: Any) -> int:
        return self._memory("nvmlDeviceGetMemoryInfo_v2", h, out)

    def c_nvmlDeviceGetMemoryInfo(self, h: Any, out: Any) -> int:
        return self._memory("nvmlDeviceGetMemoryInfo", h, out)

    def c_nvmlDeviceGetUtilizationRates(self, h: Any, out: Any) -> int:
        def answer(d: FakeGpu) -> None:
            _out(out).gpu, _out(out).memory = d.util_gpu, d.util_mem
        return self._query("nvmlDeviceGetUtilizationRates", h, answer)

    def c_nvmlDeviceGetSamples(self, h: Any, kind: Any, last_seen: Any, value_type: Any,
                             count: Any, array: Any) -> int:
        def answer(d: FakeGpu) -> int:
            fresh = [s for s in d.samples if s[0] > last_seen.value]
            if not fresh:
                return pynvml.NVML_ERROR_NOT_FOUND
            _out(value_type).value = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
            _out(count).value = len(fresh)
            for slot, (ts, value) in zip(array or (), fresh, strict=False):
                slot.timeStamp, slot.sampleValue.uiVal = ts, value
            return OK
        return self._query("nvmlDeviceGetSamples", h, answer)

    def c_nvmlDeviceGetPowerUsage(self, h: Any, out: Any) -> int:
        return self._query("nvmlDeviceGetPowerUsage", h,
                           lambda d: setattr(_out(out), "value", d.power_mw))

    def c_nvmlDeviceGetTotalEnergyConsumption(self, h: Any, out: Any) -> int:
        return self._query("nvmlDeviceGetTotalEnergyConsumption", h,
                           lambda d: setattr(_out(out), "value", d.energy_mj))

    def c_nvmlDeviceGetTemperatureV(self, h: Any, out: Any) -> int:
        return self._query("nvmlDeviceGetTemperatureV", h,
                           lambda d: setattr(_out(out), "temperature", d.temp_c))

    def c_nvmlDeviceGetTemperature(self, h: Any, sensor: Any, out: Any) -> int:
        return self._query("nvmlDeviceGetTemperature", h,
                           lambda d: setattr(_out(out), "value", d.temp_c))

    def c_nvmlDeviceGetCurrentClocksEventReasons(self, h: Any, out: Any) -> int:
        return self._query("nvmlDeviceGetCurrentClocksEventReasons", h,
                           lambda d: setattr(_out(out), "value", d.clock_event_reasons))

    def c_nvmlDeviceGetTotalEccErrors(self, h: Any, error_type: Any, counter: Any,
                                    out: Any) -> int:
        def answer(d: FakeGpu) -> None:
            corrected = _value(error_type) == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            _out(out).value = d.ecc_corrected if corrected else d.ecc_uncorrected
        return self._query("nvmlDeviceGetTotalEccErrors", h, answer)

    def c_nvmlDeviceGetRemappedRows(self, h: Any, corr: Any, unc: Any, pending: Any,
                                  failure: Any) -> int:
        return self._query("nvmlDeviceGetRemappedRows", h,
                           lambda d: setattr(_out(pending), "value", d.remap_pending))

    def c_nvmlDeviceGetComputeRunningProcesses_v3(self, h: Any, count: Any, array: Any) -> int:
        def answer(d: FakeGpu) -> int:
            wanted = _out(count).value
            _out(count).value = len(d.processes)
            if array is None or wanted < len(d.processes):
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE if d.processes else OK
            for slot, (pid, memory) in zip(array, d.processes, strict=False):
                slot.pid, slot.usedGpuMemory = pid, memory
            return OK
        return self._query("nvmlDeviceGetComputeRunningProcesses_v3", h, answer)

    def c_nvmlDeviceGetProcessUtilization(self, h: Any, array: Any, count: Any,
                                        last_seen: Any) -> int:
        def answer(d: FakeGpu) -> int:
            fresh = [s for s in d.process_util if s[1] > last_seen.value]
            if not fresh:
                return pynvml.NVML_ERROR_NOT_FOUND
            _out(count).value = len(fresh)
            if array is None:
                return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
            for slot, (pid, ts, sm) in zip(array, fresh, strict=False):
                slot.pid, slot.timeStamp, slot.smUtil = pid, ts, sm
            return OK
        return self._query("nvmlDeviceGetProcessUtilization", h, answer)

    # Events.
    def c_nvmlEventSetCreate(self, out: Any) -> int:
        ctypes.c_void_p.from_buffer(_out(out)).value = 0xE0
        return OK

    def c_nvmlDeviceGetSupportedEventTypes(self, h: Any, out: Any) -> int:
        return self._query("nvmlDeviceGetSupportedEventTypes", h,
                           lambda d: setattr(_out(out), "value", pynvml.nvmlEventTypeAll))

    def c_nvmlDeviceRegisterEvents(self, h: Any, types: Any, event_set: Any) -> int:
        return self._query("nvmlDeviceRegisterEvents", h, lambda d: None)

    def c_nvmlEventSetWait_v2(self, event_set: Any, out: Any, timeout_ms: Any) -> int:
        with self._event_ready:
            if not self._events:
                self._event_ready.wait(timeout_ms.value / 1000)
            if not self._events:
                return pynvml.NVML_ERROR_TIMEOUT
            uuid, event_type, data = self._events.pop(0)
        event = _out(out)
        event.device = ctypes.cast(ctypes.c_void_p(self._address[uuid]), pynvml.c_nvmlDevice_t)
        event.eventType, event.eventData = event_type, data
        return OK

    def c_nvmlEventSetFree(self, event_set: Any) -> int:
        return OK


@contextmanager
def installed(lib: FakeNvmlLib) -> Iterator[FakeNvmlLib]:
    """Make pynvml call `lib` instead of libnvidia-ml for the duration of the block."""
    saved = pynvml.nvmlLib
    pynvml.nvmlLib = lib
    pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        yield lib
    finally:
        pynvml.nvmlLib = saved
        pynvml._nvmlGetFunctionPointer_cache.clear()
