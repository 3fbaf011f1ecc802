from django.apps import AppConfig


class ReliabilityConfig(AppConfig):
    name = "gpuquota.reliability"
    label = "reliability"
    verbose_name = "GPU reliability: failure figures, drift, lemons"
