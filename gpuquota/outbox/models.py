from django.db import models

from gpuquota.core.fields import WholeSecondDateTimeField


class DirtyGpuHour(models.Model):
    """The outbox: a GPU-hour whose inputs changed and whose rollups must be
    recomputed. Marked in the same transaction as the change; `generation` grows
    at every mark, so a recompute deletes its row only if nothing marked it since.
    `due_at` is when the sweep takes it (see `gpuquota.outbox.services`: an open hour
    waits up to the freshness interval, a closed one is due at once); a new mark keeps
    the earlier due time."""

    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="+")
    hour = WholeSecondDateTimeField()
    generation = models.BigIntegerField(default=1)
    marked_at = models.DateTimeField()
    due_at = models.DateTimeField()

    class Meta:
        db_table = "usage_dirtygpuhour"  # the table the usage app created, kept
        constraints = [
            models.UniqueConstraint(fields=["gpu", "hour"], name="dirty_gpu_hour_unique")
        ]
        indexes = [
            models.Index(fields=["marked_at"], name="usage_dirty_marked__8f6318_idx"),
            models.Index(fields=["due_at", "id"], name="outbox_dirty_due_idx"),
        ]

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} {self.hour:%Y-%m-%d %H}:00 (generation {self.generation})"
