from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo organisation, its history and `manage.py demo`: it may import every app;
    no app imports it."""

    name = "gpuquota.demo"
    label = "demo"
    verbose_name = "Demo"
