from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "gpuquota.reservations"
    label = "reservations"
    verbose_name = "Quotas and reservations"

    def ready(self):
        from gpuquota.core.attention import attention_source
        from gpuquota.reservations.attention import approvals_attention

        attention_source(approvals_attention)  # what waits for an admin, on the home page
