from django.apps import AppConfig


class ReclaimConfig(AppConfig):
    name = "reclaim"
    verbose_name = "Reclaim of idle and oversized reservations"
