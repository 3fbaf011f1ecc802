"""DCGM's profiling figures over a job (docs/jobs.md, "SM and tensor activity"): pure, like
`analysis`. A sample carries them where its source had them (the telemetry importer, from
dcgm-exporter's DCGM_FI_PROF_SM_ACTIVE, _SM_OCCUPANCY, _PIPE_TENSOR_ACTIVE, _DRAM_ACTIVE; the
agent reads none yet); a window without one is no data for it, never 0, and a job or GPU
with no such window has no profile at all ("no profiling data").

NVML's utilization says only that a kernel ran; these say how much of the GPU it kept busy:
SM active, the SMs' mean share of cycles with a warp resident; SM occupancy, the warps
resident against the most an SM holds; tensor active, the share of cycles the tensor pipes
ran; DRAM active, the memory interface's. DCGM reads them on data-centre GPUs from Volta on,
all of which have tensor cores: a GPU that reports tensor activity has them."""

from __future__ import annotations

from dataclasses import dataclass, field

FIELDS = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")


@dataclass
class Profile:
    """Seconds-weighted means of each profiling figure over the windows that carry it."""

    seconds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FIELDS, 0))
    weighted: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FIELDS, 0.0))

    def add(self, seconds: int, point) -> None:
        for name in FIELDS:
            value = getattr(point, name)
            if value is not None:
                self.seconds[name] += seconds
                self.weighted[name] += seconds * float(value)

    def merge(self, other: Profile) -> None:
        for name in FIELDS:
            self.seconds[name] += other.seconds[name]
            self.weighted[name] += other.weighted[name]

    @property
    def empty(self) -> bool:
        return not any(self.seconds.values())

    def mean(self, name: str) -> float | None:
        """The mean of `name` (percent) over the seconds that carry it; None: no data."""
        return self.weighted[name] / self.seconds[name] if self.seconds[name] else None

    def means(self) -> dict[str, float | None]:
        return {name: self.mean(name) for name in FIELDS}


def profile_figures(profile: Profile | None) -> dict[str, float | None] | None:
    """The means rounded to 0.1 for a page or the API; None: no profiling data."""
    if profile is None or profile.empty:
        return None
    return {name: None if v is None else round(v, 1) for name, v in profile.means().items()}


def profile_of(profiles: list[Profile]) -> Profile | None:
    """The profiles merged (a job's, from its GPUs'); None when none has any data."""
    merged = Profile()
    for profile in profiles:
        merged.merge(profile)
    return None if merged.empty else merged


def tensor_cores_unused(*, used_sampled_s: int, util_pct: float, profile: Profile | None,
                        min_util_pct: int, max_tensor_pct: float,
                        min_coverage_pct: int) -> str | None:
    """The note's title when the used GPUs were busy (NVML) at `min_util_pct` or more while
    their tensor pipes ran under `max_tensor_pct` of the cycles, over windows covering at
    least `min_coverage_pct` of their sampled time; else None (no data: no note)."""
    if profile is None or not used_sampled_s:
        return None
    tensor = profile.mean("tensor_active_pct")
    covered = profile.seconds["tensor_active_pct"]
    if (tensor is None or 100 * covered < min_coverage_pct * used_sampled_s
            or util_pct < min_util_pct or tensor >= max_tensor_pct):
        return None
    return (f"The GPUs were busy {util_pct:.0f} % of the time but their tensor cores ran "
            f"{tensor:.1f} % of the cycles.")
