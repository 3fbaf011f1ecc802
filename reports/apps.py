from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "reports"
    verbose_name = "Reports and chargeback"

    def ready(self):
        from gpuquota.core.attention import attention_source
        from reports.attention import statements_attention

        attention_source(statements_attention)  # what waits for an admin, on the home page
