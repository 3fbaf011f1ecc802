"""A GPU's device-level sample fields (power, energy, temperature, ECC) from its gathered
figures, window by window, as the agent reports them (`normalise.py` uses them)."""

from itertools import repeat

from gpuquota.telemetry.gather import GatheredGpu


def _delta(series: dict, ws: int, window_s: int) -> float | None:
    now, before = series.get(ws), series.get(ws - window_s)
    return None if now is None or before is None else now - before


class Device:
    """A GPU's device-level figures, looked up once, and each window's sample fields from
    them: power_w_avg, energy_j, temp_c_max, ecc_uncorrected and ecc_corrected."""

    __slots__ = ("power", "energy", "resets", "temp", "dbe", "sbe", "window_s")

    def __init__(self, gpu: GatheredGpu, window_s: int):
        dev = gpu.device
        self.power, self.energy, self.resets = (dev["power_avg"], dev["energy_last"],
                                                dev["energy_resets"])
        self.temp, self.dbe, self.sbe = dev["temp_max"], dev["dbe_last"], dev["sbe_last"]
        self.window_s = window_s

    def fields(self, ws: int) -> tuple:
        now, before = self.energy.get(ws), self.energy.get(ws - self.window_s)
        energy = None if now is None or before is None else now - before
        reset = (self.resets.get(ws) or 0) > 0 or (energy is not None and energy < 0)
        # ECC counters and temperature are missing from many exporters' fields
        dbe = _delta(self.dbe, ws, self.window_s) if self.dbe else None
        sbe = _delta(self.sbe, ws, self.window_s) if self.sbe else None
        temp = self.temp.get(ws) if self.temp else None
        return (self.power.get(ws), None if reset or energy is None else energy / 1000.0,
                None if temp is None else round(temp),
                None if dbe is None or dbe < 0 else round(dbe),
                None if sbe is None or sbe < 0 else round(sbe))

    def columns(self, windows: list[int]) -> list[tuple]:
        """`fields` of each window in `windows`: for a GPU without temperature and ECC
        figures (most exporters' default set) the dictionaries are read in C (`map`), with
        the very same arithmetic."""
        if self.temp or self.dbe or self.sbe:
            return [self.fields(ws) for ws in windows]
        energy, resets, w = self.energy, self.resets, self.window_s
        joules = []
        for ws, now, before in zip(windows, map(energy.get, windows),
                                   map(energy.get, [ws - w for ws in windows]), strict=True):
            grown = None if now is None or before is None else now - before
            reset = (resets and (resets.get(ws) or 0) > 0) or (grown is not None and grown < 0)
            joules.append(None if reset or grown is None else grown / 1000.0)
        return list(zip(map(self.power.get, windows), joules, repeat(None), repeat(None),
                        repeat(None)))
