from django.apps import AppConfig


class RatesConfig(AppConfig):
    name = "gpuquota.rates"
    label = "rates"
    verbose_name = "Rate cards"
