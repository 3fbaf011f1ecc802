from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "gpuquota.usage"
    label = "usage"
    verbose_name = "Usage rollups and health"

    def ready(self):
        from gpuquota.core.attention import attention_source
        from gpuquota.usage.attention import fleet_attention

        attention_source(fleet_attention)  # what waits for an admin, on the home page
