from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "gpuquota.usage"
    label = "usage"
    verbose_name = "Usage rollups and health"
