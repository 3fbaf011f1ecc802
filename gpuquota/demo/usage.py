"""Demo support for the usage app, called by the lead's demo commands."""

from gpuquota.usage.sweep import dirty_hours_process


def demo_usage_catch_up(*, limit: int = 100_000) -> int:
    """Recompute every dirty GPU-hour now (idempotent: an empty outbox does nothing), so
    seeded backfills and samples show in the pages before the first beat tick."""
    done = 0
    while (batch := dirty_hours_process(limit=min(limit - done, 2000))) and done < limit:
        done += batch
    return done
