from django.apps import AppConfig
from django.core import checks


class CoreConfig(AppConfig):
    name = "gpuquota.core"
    label = "core"
    verbose_name = "Platform"

    def ready(self) -> None:
        from gpuquota.core.contributions import contributions_check

        checks.register(contributions_check)
