from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "gpuquota.core"
    label = "core"
    verbose_name = "Platform"
