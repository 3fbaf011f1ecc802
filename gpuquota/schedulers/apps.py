from django.apps import AppConfig


class SchedulersConfig(AppConfig):
    name = "gpuquota.schedulers"
    label = "schedulers"
    verbose_name = "Scheduler backends"
