"""Window alignment, rounding, and the aggregation of polls into one sample per GPU and window."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction

from agent.model import GpuReading, Owner

MAX_WINDOW_S = 600  # the protocol refuses longer windows


def check_window_s(window_s: int) -> None:
    """Raise ValueError unless `window_s` is a whole number of seconds that divides 3600."""
    if not 1 <= window_s <= MAX_WINDOW_S or 3600 % window_s:
        raise ValueError(f"window must divide 3600 and be 1..{MAX_WINDOW_S} s, got {window_s}")


def window_end_after(t: float, window_s: int) -> int:
    """The first window boundary strictly after instant `t` (boundaries are multiples from 0Z)."""
    return (math.floor(t) // window_s + 1) * window_s


def iso(ts: float) -> str:
    """`ts` as an RFC 3339 UTC timestamp in whole seconds (truncated towards the past)."""
    return datetime.fromtimestamp(math.floor(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def round_half_up(value: Fraction | float | int | None, places: int = 2) -> float | None:
    """`value` rounded half away from zero at `places` decimals, computed exactly."""
    if value is None:
        return None
    exact = value if isinstance(value, Fraction) else Fraction(repr(value))
    scale = 10**places
    scaled = abs(exact) * scale
    rounded = math.floor(scaled + Fraction(1, 2))
    return math.copysign(rounded / scale, exact) if exact else 0.0


@dataclass
class Mean:
    """A running mean and maximum, exact until it is rounded."""

    total: Fraction = Fraction(0)
    count: int = 0
    max: float | None = None

    def add(self, value: float | int) -> None:
        self.total += Fraction(value) if isinstance(value, int) else Fraction(repr(value))
        self.count += 1
        self.max = value if self.max is None else max(self.max, value)

    def avg(self) -> Fraction | None:
        return self.total / self.count if self.count else None


@dataclass
class ProcessWindow:
    """One process on one GPU over a window."""

    pid: int
    pid_start: int
    command: str | None
    owner: Owner | None
    memory_max: int | None = None
    util_sm: Mean = field(default_factory=Mean)
    util_sm_supported: bool = False


@dataclass
class CounterDelta:
    """A cumulative counter turned into per-window deltas; a step backwards voids the window."""

    last: int | None = None
    delta: int = 0
    void: bool = False  # the counter went backwards or disappeared in this window

    def add(self, value: int | None) -> bool:
        """Take one reading; return True when the counter went backwards (a reset)."""
        if value is None:
            self.void = self.void or self.last is not None
            self.last = None
            return False
        reset = self.last is not None and value < self.last
        if reset:
            self.void = True
        elif self.last is not None:
            self.delta += value - self.last
        self.last = value
        return reset

    def take(self) -> int | None:
        """This window's delta (None when unknown), and start the next window."""
        known = self.last is not None and not self.void
        result = self.delta if known else None
        self.delta, self.void = 0, self.last is None
        return result


@dataclass
class GpuWindow:
    """Everything one GPU reported during the current window."""

    readings: int = 0
    util_gpu: Mean = field(default_factory=Mean)
    util_mem: Mean = field(default_factory=Mean)
    memory_used: Mean = field(default_factory=Mean)
    power_w: Mean = field(default_factory=Mean)
    temp_c_max: int | None = None
    clock_event_reasons: int | None = None
    processes: dict[tuple[int, int], ProcessWindow] = field(default_factory=dict)


class GpuAccumulator:
    """Aggregates one GPU's polls into samples; its counters carry over from window to window."""

    def __init__(self) -> None:
        self.window = GpuWindow()
        self.energy = CounterDelta(void=True)
        self.ecc_corrected = CounterDelta(void=True)
        self.ecc_uncorrected = CounterDelta(void=True)

    def prime(self, reading: GpuReading) -> None:
        """Take the counters' starting values; the interval before this reading is not ours."""
        for counter, value in self._counters(reading):
            counter.add(value)
            counter.take()

    def add(self, reading: GpuReading) -> list[str]:
        """Fold one poll into the window; return the names of the counters that were reset."""
        w = self.window
        w.readings += 1
        for value in reading.util_gpu or ():
            w.util_gpu.add(value)
        for mean, value in (
            (w.util_mem, reading.util_mem),
            (w.memory_used, reading.memory_used_bytes),
            (w.power_w, reading.power_w),
        ):
            if value is not None:
                mean.add(value)
        if reading.temp_c is not None and (w.temp_c_max is None or reading.temp_c > w.temp_c_max):
            w.temp_c_max = reading.temp_c
        if reading.clock_event_reasons is not None:
            w.clock_event_reasons = (w.clock_event_reasons or 0) | reading.clock_event_reasons
        return [name for name, (counter, value) in zip(
            ("energy", "ecc_corrected", "ecc_uncorrected"), self._counters(reading), strict=True,
        ) if counter.add(value)]

    def add_process(self, key: tuple[int, int], command: str | None, owner: Owner | None,
                    memory_used_bytes: int | None, util_sm: list[float] | None) -> None:
        """Record one process seen at one poll."""
        proc = self.window.processes.get(key)
        if proc is None:
            proc = self.window.processes[key] = ProcessWindow(key[0], key[1], command, owner)
        if memory_used_bytes is not None:
            proc.memory_max = max(proc.memory_max or 0, memory_used_bytes)
        if util_sm is not None:
            proc.util_sm_supported = True
            # Supported but silent means the process ran no kernel since the last poll.
            for value in util_sm or (0,):
                proc.util_sm.add(value)

    def take(self) -> tuple[GpuWindow, dict[str, int | None]]:
        """The finished window and its counter deltas; the accumulator starts the next window."""
        window, self.window = self.window, GpuWindow()
        deltas = {
            "energy_mj": self.energy.take(),
            "ecc_corrected": self.ecc_corrected.take(),
            "ecc_uncorrected": self.ecc_uncorrected.take(),
        }
        return window, deltas

    def _counters(self, reading: GpuReading) -> list[tuple[CounterDelta, int | None]]:
        return [
            (self.energy, reading.energy_mj),
            (self.ecc_corrected, reading.ecc_corrected_total),
            (self.ecc_uncorrected, reading.ecc_uncorrected_total),
        ]
