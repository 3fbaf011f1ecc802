from django.apps import AppConfig


class ReclaimConfig(AppConfig):
    name = "reclaim"
    verbose_name = "Reclaim of idle and oversized reservations"

    def ready(self):
        from gpuquota.core.attention import attention_source
        from reclaim.attention import reclaim_attention

        attention_source(reclaim_attention)  # what waits for an admin, on the home page
