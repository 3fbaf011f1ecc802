from django.apps import AppConfig
from django.core import checks


class OutboxConfig(AppConfig):
    name = "gpuquota.outbox"
    label = "outbox"
    verbose_name = "Outbox (recompute marks, notifications)"

    def ready(self) -> None:
        from gpuquota.outbox.checks import freshness_bounds_check

        checks.register(freshness_bounds_check)
