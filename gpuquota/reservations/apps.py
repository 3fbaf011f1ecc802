from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "gpuquota.reservations"
    label = "reservations"
    verbose_name = "Quotas and reservations"
