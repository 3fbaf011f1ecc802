from django.apps import AppConfig


class LendingConfig(AppConfig):
    name = "gpuquota.lending"
    label = "lending"
    verbose_name = "Lending of idle reserved GPUs"
