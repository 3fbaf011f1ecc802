from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "gpuquota.outbox"
    label = "outbox"
    verbose_name = "Recompute outbox"
