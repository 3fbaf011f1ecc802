from django.db import models

from gpuquota.core.fields import WholeSecondDateTimeField


class DirtyGpuHour(models.Model):
    """The outbox: a GPU-hour whose inputs changed and whose rollups must be
    recomputed. Marked in the same transaction as the change; `generation` grows
    at every mark, so a recompute deletes its row only if nothing marked it since."""

    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="+")
    hour = WholeSecondDateTimeField()
    generation = models.BigIntegerField(default=1)
    marked_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu", "hour"], name="dirty_gpu_hour_unique")
        ]
        indexes = [models.Index(fields=["marked_at"])]
