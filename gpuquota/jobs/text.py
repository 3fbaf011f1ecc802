"""A job's report as plain text, as `manage.py jobstats` prints it (a Slurm epilog, a login
node): jobstats' layout, gpuquota's notes."""

from __future__ import annotations

from gpuquota.jobs.profiling import Profile, profile_figures
from gpuquota.jobs.report import JobReport

RULE = "=" * 78


def _bar(pct: float | None, width: int = 40) -> str:
    if pct is None:
        return "[" + " " * width + "  no data]"
    filled = round(width * min(100.0, max(0.0, pct)) / 100)
    return "[" + "|" * filled + " " * (width - filled) + f" {pct:3.0f}%]"


def _length(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours:d}:{rest // 60:02d}:{rest % 60:02d}"


def _profiling_lines(profile: Profile | None) -> list[str]:
    figures = profile_figures(profile)
    if figures is None:
        return ["SM/tensor        no profiling data"]
    return [f"SM active        {_bar(figures['sm_active_pct'])}",
            f"SM occupancy     {_bar(figures['sm_occupancy_pct'])}",
            f"Tensor active    {_bar(figures['tensor_active_pct'])}",
            f"DRAM active      {_bar(figures['dram_active_pct'])}"]


def _profiling_short(profile: Profile | None) -> str:
    figures = profile_figures(profile)
    if figures is None:
        return "no profiling data"
    return " ".join(f"{label} {'-' if figures[name] is None else f'{figures[name]:.0f}%'}"
                    for label, name in (("sm", "sm_active_pct"), ("tensor", "tensor_active_pct")))


def report_text(report: JobReport) -> str:
    job, a = report.job, report.analysis
    lines = [RULE, "gpuquota job report", RULE,
             f"Job ID:      {job.job_id} ({job.get_source_display()})",
             f"Cluster:     {job.cluster.name}",
             f"User/Team:   {job.user_name or '-'} / {job.team.name if job.team else '-'}",
             f"State:       {job.state or '-'}",
             f"Start:       {job.started_at:%Y-%m-%d %H:%M:%S} UTC",
             f"Run time:    {_length(a.duration_s)}"
             + (f" of a {_length(job.time_limit_s)} limit" if job.time_limit_s else ""),
             f"GPUs:        {a.gpus_held} held, {a.held_gpu_s / 3600:.2f} GPU-hours",
             "Cost:        " + (f"{report.cost} {report.currency} at the on-demand rate"
                                if report.cost is not None else "no rate card"),
             f"Energy:      {a.energy_j / 3.6e6:.2f} kWh",
             "", "Overall", RULE,
             f"GPU utilization  {_bar(a.util_avg_pct)}",
             f"GPU idle share   {_bar(a.idle_share_pct)}",
             *_profiling_lines(a.profile),
             "", "Per GPU", RULE]
    for g in a.gpus:
        memory = (f"{g.memory_max_bytes / 1024 ** 3:.1f}/{g.memory_total_bytes / 1024 ** 3:.0f}"
                  " GiB" if g.memory_max_bytes is not None and g.memory_total_bytes else "-")
        lines.append(f"{g.key:<20} util {_bar(g.util_avg_pct, 20)}  memory {memory}  "
                     f"idle {g.idle_s // 60} min  {_profiling_short(g.profile)}")
    lines += ["", "Notes", RULE]
    if not a.notes:
        lines.append("No pitfall found.")
    for n in a.notes:
        waste = ""
        if n.wasted_gpu_s:
            cost = report.wasted_cost(n.wasted_gpu_s)
            waste = f" [wasted {n.wasted_gpu_s / 3600:.2f} GPU-hours" + (
                f", {cost} {report.currency}]" if cost is not None else "]")
        lines += [f"* {n.title}{waste}", f"  {n.advice}"]
    if a.wasted_gpu_s:
        lines += ["", f"Wasted in all: {a.wasted_gpu_s / 3600:.2f} GPU-hours"
                  + (f", {report.wasted_cost(a.wasted_gpu_s)} {report.currency}"
                     if report.cost is not None else "")]
    lines.append(RULE)
    return "\n".join(lines)
