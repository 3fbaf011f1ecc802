from django.db import models

from gpuquota.core.fields import WholeSecondDateTimeField


class DirtyGpuHour(models.Model):
    """The outbox: a GPU-hour whose inputs changed and whose rollups must be
    recomputed. Marked in the same transaction as the change; `due_at` is when the sweep
    takes it and `marked_at` when its oldest change not rolled up yet was marked (see
    `gpuquota.outbox.services`: an open hour waits up to the freshness interval, less the
    sweep's slack; a closed one is due at once). Re-marking a mark that waits writes
    nothing; re-marking one already due bumps `generation`, and a sweep that read the
    old generation leaves the row for the next sweep."""

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
