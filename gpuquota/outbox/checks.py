"""System checks of the outbox's settings: the freshness bound must leave room for a
beat interval and a sweep, or marks fall due at once and the bound does not hold."""

from django.core import checks

from gpuquota.outbox.conf import (
    dirty_sweep_budget_s,
    dirty_sweep_interval_s,
    rollup_final_delay_s,
    rollup_freshness_s,
)


def freshness_bounds_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A warning for each bound shorter than a sweep interval plus the sweep's budget."""
    slack_s = dirty_sweep_interval_s() + dirty_sweep_budget_s()
    bounds = [("USAGE_ROLLUP_FRESHNESS_S", rollup_freshness_s(), "open hours", "outbox.W001"),
              ("USAGE_ROLLUP_FINAL_DELAY_S", rollup_final_delay_s(), "closed hours",
               "outbox.W002")]
    return [
        checks.Warning(
            f"{name} ({bound_s:g} s) is shorter than a sweep interval plus the sweep's budget "
            f"({slack_s:g} s): rollups of {what} can lag it.",
            hint="Lower USAGE_DIRTY_SWEEP_INTERVAL_S or USAGE_DIRTY_SWEEP_BUDGET_S, or raise "
                 f"{name}.", id=check_id)
        for name, bound_s, what, check_id in bounds if bound_s < slack_s
    ]
