from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "gpuquota.jobs"
    label = "jobs"
    verbose_name = "Job reports: per-job efficiency and its pitfalls"
