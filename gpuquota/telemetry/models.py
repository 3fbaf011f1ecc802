"""Telemetry sources: where gpuquota reads GPU figures a site already collects
(dcgm-exporter endpoints scraped directly, or a Prometheus-compatible query API), and
how far each has been imported."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from gpuquota.core.fields import WholeSecondDateTimeField


class SourceKind(models.TextChoices):
    EXPORTER = "exporter", "dcgm-exporter endpoints (scraped directly)"
    PROMETHEUS = "prometheus", "Prometheus-compatible query API"


class AuthKind(models.TextChoices):
    NONE = "none", "None"
    BASIC = "basic", "Basic (user and password)"
    BEARER = "bearer", "Bearer token"


class UtilMetric(models.TextChoices):
    GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "graphics engine active (profiling)"
    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (kernel active)"
    NONE = "none", "none (MIG without profiling metrics: no data)"


class TelemetrySource(models.Model):
    """One place to read a cluster's GPU figures from. Its secret is stored encrypted
    (`secrets.py`) and never shown again; `cursor` is the end of the last window imported."""

    name = models.SlugField(max_length=64, unique=True)
    cluster = models.ForeignKey("inventory.Cluster", on_delete=models.PROTECT,
                                related_name="telemetry_sources")
    kind = models.CharField(max_length=16, choices=SourceKind.choices)
    enabled = models.BooleanField(default=True)
    urls = models.TextField(blank=True, help_text="dcgm-exporter /metrics URLs, one a line.")
    base_url = models.URLField(max_length=500, blank=True,
                               help_text="The query API's root, e.g. http://prometheus:9090")
    selector = models.CharField(
        max_length=500, blank=True,
        help_text='Label matchers added to every query, e.g. job="dcgm-exporter".')
    auth = models.CharField(max_length=8, choices=AuthKind.choices, default=AuthKind.NONE)
    username = models.CharField(max_length=200, blank=True)
    secret_encrypted = models.TextField(blank=True)
    secret_prefix = models.CharField(max_length=8, blank=True)
    tls_verify = models.BooleanField(default=True)
    ca_bundle = models.CharField(max_length=500, blank=True,
                                 help_text="Path of a CA bundle on the server (PEM).")
    node_label = models.CharField(
        max_length=100, default="Hostname",
        help_text="The label naming a new GPU's node (GPUs are keyed by UUID; this only "
                  "places a GPU seen for the first time).")
    interval_s = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1), MaxValueValidator(3600)],
        help_text="Exporters: the scrape interval. Prometheus: how often to pull.")
    scrape_interval_s = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(600)],
        help_text="How often the figures are sampled at the source (gaps longer than "
                  "twice this are no data).")
    window_s = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1),
                                                                   MaxValueValidator(600)])
    delay_s = models.PositiveIntegerField(
        default=60, help_text="A window is imported this long after it closes (Prometheus "
                              "needs its scrape to land).")
    cursor = WholeSecondDateTimeField(null=True, blank=True)
    last_pull_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)
    observed = models.JSONField(
        default=dict, blank=True,
        help_text="What its series showed: the fields read and the labels naming workloads "
                  "(the pages say what this variant of dcgm-exporter cannot carry).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=SourceKind.values),
                                   name="telemetry_source_kind_valid"),
            models.CheckConstraint(condition=Q(auth__in=AuthKind.values),
                                   name="telemetry_source_auth_valid"),
            models.CheckConstraint(condition=Q(window_s__gte=1) & Q(window_s__lte=600),
                                   name="telemetry_source_window_valid"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def url_list(self) -> list[str]:
        return [line.strip() for line in self.urls.splitlines() if line.strip()]


class SourceGpu(models.Model):
    """A GPU a source reports, and which utilization metric it was read from (the pages
    say so: graphics-engine activity and kernel-active time are different figures)."""

    source = models.ForeignKey(TelemetrySource, on_delete=models.PROTECT, related_name="gpus")
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="+")
    util_metric = models.CharField(max_length=40, choices=UtilMetric.choices)
    last_window_end = WholeSecondDateTimeField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "gpu"], name="telemetry_source_gpu_unique"),
            models.CheckConstraint(condition=Q(util_metric__in=UtilMetric.values),
                                   name="telemetry_source_gpu_util_metric_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.source_id}/{self.gpu_id}"


class ScrapedReading(models.Model):
    """One scrape of one exporter, kept until the windows it falls in are imported:
    `series` is [[metric, {labels}, value], ...] of the fields gpuquota reads."""

    source = models.ForeignKey(TelemetrySource, on_delete=models.CASCADE,
                               related_name="readings")
    url = models.CharField(max_length=500)
    at = models.FloatField(help_text="Unix time of the scrape, in seconds.")
    series = models.JSONField()

    class Meta:
        indexes = [models.Index(fields=["source", "at"], name="telemetry_reading_at")]

    def __str__(self) -> str:
        return f"{self.source_id} {self.url} @ {self.at}"
