from django.apps import AppConfig


class MailConfig(AppConfig):
    name = "gpuquota.mail"
    label = "mail"
    verbose_name = "Mail deliveries"
