from django.db import models
from django.db.models import Value
from django.db.models.functions import Coalesce

from gpuquota.core.fields import WholeSecondDateTimeField


class GpuHourUsage(models.Model):
    """What one physical GPU did in one UTC hour, per attribution bucket.

    A bucket is (kind, assignment, owner team, split_ways, failed, gpu class, rate card
    in force): rows are cut at rate-card boundaries too, so a month can be priced from
    the rollups alone once its raw samples have expired.
    Every second in a row is a whole second: the row's `covered_s` and `busy_s`
    are the seconds of the windows that fell in the bucket. A window of
    unreserved time with processes of n distinct owner teams gives n rows with
    `split_ways = n`, each holding the window's full seconds: a team's exact
    share is `busy_s / split_ways`. Sums group by `split_ways` and divide once
    (see `selectors`), so nothing is rounded before an amount is computed.
    Rows of one GPU-hour are brought up to date together by `gpu_hour_recompute` and the
    sweep, writing only what changed (`rollup_rows`): `computed_at` is when a row's
    figures last changed.
    """

    class Kind(models.TextChoices):
        RESERVED = "reserved", "Reserved (an assignment)"
        UNRESERVED = "unreserved", "Unreserved"
        BORROWED = "borrowed", "Borrowed (a loan of an assignment)"

    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="+")
    hour = WholeSecondDateTimeField()
    gpu_class = models.ForeignKey("inventory.GpuClass", on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    assignment = models.ForeignKey(
        "reservations.Assignment", null=True, on_delete=models.PROTECT, related_name="+"
    )
    reservation = models.ForeignKey(
        "reservations.Reservation", null=True, on_delete=models.PROTECT, related_name="+"
    )
    team = models.ForeignKey(
        "accounts.Team", null=True, on_delete=models.PROTECT, related_name="+",
        help_text="Reserved: the reservation's team. Unreserved and borrowed: the owner "
        "team; empty = unattributed.",
    )
    split_ways = models.PositiveSmallIntegerField(default=1)
    failed = models.BooleanField(default=False, help_text="Seconds while the GPU was failed.")
    rate_card = models.ForeignKey(
        "rates.RateCard", null=True, on_delete=models.PROTECT, related_name="+",
        help_text="The rate card of the class in force over these seconds; empty = none.",
    )
    covered_s = models.IntegerField(default=0)
    busy_s = models.IntegerField(default=0)
    util_weighted = models.DecimalField(
        max_digits=14, decimal_places=2, default=0, help_text="Σ util_gpu_avg × covered seconds"
    )
    energy_j = models.FloatField(default=0)
    memory_used_bytes_max = models.BigIntegerField(null=True)
    process_count = models.IntegerField(default=0)
    users_seen = models.JSONField(default=list, help_text="Unix user names seen, sorted.")
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=["reserved", "unreserved", "borrowed"]),
                name="usage_kind_valid",
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(kind="reserved", assignment__isnull=False, split_ways=1)
                    | models.Q(kind="unreserved", assignment__isnull=True)
                    | models.Q(kind="borrowed", assignment__isnull=False,
                               reservation__isnull=False)
                ),
                name="usage_reserved_has_assignment",
            ),
            models.CheckConstraint(
                condition=models.Q(split_ways__gte=1) & models.Q(busy_s__gte=0) & (
                    models.Q(covered_s__gte=models.F("busy_s"))
                    | models.Q(kind="borrowed", covered_s=0)),
                name="usage_seconds_valid",
            ),
            models.UniqueConstraint(
                "gpu",
                "hour",
                "gpu_class",
                "kind",
                Coalesce("assignment", Value(0)),
                Coalesce("team", Value(0)),
                "split_ways",
                "failed",
                Coalesce("rate_card", Value(0)),
                name="usage_bucket_unique",
            ),
        ]
        indexes = [
            # One column: PostgreSQL costs a range of hours by the column's correlation
            # (rows arrive hour by hour) only on a one-column index; on (hour, kind) it chose
            # a scan of the whole table for a day's hours.
            models.Index(fields=["hour"], name="usage_hour_idx"),
            models.Index(fields=["reservation", "hour"]),
            models.Index(fields=["team", "hour"]),
        ]

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} {self.hour:%Y-%m-%d %H}:00 {self.kind}"


class GpuDayUsage(models.Model):
    """The hourly rollup rows of one physical GPU and UTC day, summed per bucket: what a
    page over whole days reads instead of 24 rows per GPU (issue 12: a month of 10,000
    GPUs). Kept by the same write that changes the hourly rows (`rollup_days`), in its
    transaction, so it always equals `GpuHourUsage` grouped by day: `hours` counts the
    hourly rows summed, and a bucket left without any is deleted. A bucket is an hourly one
    without its rate card (the pages do not price; a card boundary's two rows of an hour
    count twice in `hours`; relabelling whole hours with another card changes no day row).
    Only the additive figures the pages read are kept (seconds, util-weighted seconds)."""

    # No index per reference: the bucket's unique index (GPU first) and (team, day) serve
    # the reads; fewer indexes to keep on each write.
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="+",
                            db_index=False)
    day = models.DateField()
    gpu_class = models.ForeignKey("inventory.GpuClass", on_delete=models.PROTECT,
                                  related_name="+", db_index=False)
    kind = models.CharField(max_length=16, choices=GpuHourUsage.Kind.choices)
    assignment = models.ForeignKey("reservations.Assignment", null=True, db_index=False,
                                   on_delete=models.PROTECT, related_name="+")
    reservation = models.ForeignKey("reservations.Reservation", null=True, db_index=False,
                                    on_delete=models.PROTECT, related_name="+")
    team = models.ForeignKey("accounts.Team", null=True, on_delete=models.PROTECT,
                             related_name="+", db_index=False)
    split_ways = models.PositiveSmallIntegerField(default=1)
    failed = models.BooleanField(default=False)
    hours = models.PositiveSmallIntegerField(help_text="Hourly rows summed here.")
    covered_s = models.IntegerField(default=0)
    busy_s = models.IntegerField(default=0)
    util_weighted = models.DecimalField(max_digits=16, decimal_places=2, default=0)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(kind__in=["reserved", "unreserved", "borrowed"]),
                name="usage_day_kind_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(hours__gte=1) & models.Q(busy_s__gte=0) & (
                    models.Q(covered_s__gte=models.F("busy_s"))
                    | models.Q(kind="borrowed", covered_s=0)),
                name="usage_day_sums_valid",
            ),
            models.UniqueConstraint(
                "gpu", "day", "gpu_class", "kind", Coalesce("assignment", Value(0)),
                Coalesce("team", Value(0)), "split_ways", "failed", name="usage_day_bucket_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["day"], name="usage_day_idx"),
            models.Index(fields=["team", "day"]),
        ]

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} {self.day:%Y-%m-%d} {self.kind}"


class FleetUsage(models.Model):
    """The rollup rows of the whole fleet summed per bucket for one hour or day: what the
    utilization page reads instead of a row per GPU (issue 34: 100,000 GPUs). A bucket is
    (class, kind, owner team of unreserved time, split_ways, failed): what the page
    groups by. Kept by the same write that changes the hourly rows (`rollup_fleet`), so it
    always equals `GpuHourUsage` (`GpuDayUsage` for the day rows) grouped by bucket:
    `hourly_rows` counts the hourly rows summed, and a bucket left without any is deleted."""

    gpu_class = models.ForeignKey("inventory.GpuClass", on_delete=models.PROTECT,
                                  related_name="+", db_index=False)
    kind = models.CharField(max_length=16, choices=GpuHourUsage.Kind.choices)
    owner = models.ForeignKey("accounts.Team", null=True, on_delete=models.PROTECT,
                              related_name="+", db_index=False,
                              help_text="The owner team of unreserved rows; empty otherwise.")
    split_ways = models.PositiveSmallIntegerField(default=1)
    failed = models.BooleanField(default=False)
    # Not a positive field: PostgreSQL checks an upsert's proposed row, a negative change.
    hourly_rows = models.IntegerField(help_text="Hourly rows summed here.")
    covered_s = models.BigIntegerField(default=0)
    busy_s = models.BigIntegerField(default=0)
    util_weighted = models.DecimalField(max_digits=22, decimal_places=2, default=0)

    class Meta:
        abstract = True


class FleetHourUsage(FleetUsage):
    hour = WholeSecondDateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                "hour", "gpu_class", "kind", Coalesce("owner", Value(0)), "split_ways",
                "failed", name="usage_fleet_hour_unique"),
        ]

    def __str__(self) -> str:
        return f"fleet {self.hour:%Y-%m-%d %H}:00 {self.kind}"


class FleetDayUsage(FleetUsage):
    day = models.DateField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                "day", "gpu_class", "kind", Coalesce("owner", Value(0)), "split_ways",
                "failed", name="usage_fleet_day_unique"),
        ]

    def __str__(self) -> str:
        return f"fleet {self.day:%Y-%m-%d} {self.kind}"


class NodeSilence(models.Model):
    """A node's agent silent past AGENT_SILENT_AFTER_S, as the silence scan noticed it
    (`gpuquota.usage.silence`): one open row per node, so the admins' channels hear of a
    silence once, and once more when the node reports again (`ended_at`)."""

    node = models.ForeignKey("inventory.Node", on_delete=models.PROTECT,
                             related_name="silences")
    last_seen_at = models.DateTimeField(
        null=True, blank=True, help_text="Its last report before the silence; empty: never.")
    noticed_at = WholeSecondDateTimeField()
    ended_at = models.DateTimeField(
        null=True, blank=True, help_text="Its first report after the silence, once noticed.")

    class Meta:
        ordering = ["-noticed_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["node"], condition=models.Q(ended_at__isnull=True),
                                    name="node_silence_one_open"),
        ]

    def __str__(self) -> str:
        return f"{self.node} silent since {self.last_seen_at or 'never'}"


class FleetSummarySnapshot(models.Model):
    """The fleet page's summary cards as counted by the `usage.fleet_summary` task each
    minute (docs/benchmarks.md#fleet-scale: the mean utilization now reads every GPU's last
    window, seconds at 100,000 GPUs); the page counts live when none is recent."""

    at = WholeSecondDateTimeField(unique=True)
    gpus = models.PositiveIntegerField()
    failed = models.PositiveIntegerField()
    degraded = models.PositiveIntegerField()
    reserved = models.PositiveIntegerField()
    nodes_reporting = models.PositiveIntegerField()
    nodes_silent = models.PositiveIntegerField()
    nodes_nvml_down = models.PositiveIntegerField()
    nodes_with_problems = models.PositiveIntegerField()
    util_mean = models.DecimalField(max_digits=7, decimal_places=3, null=True, blank=True)

    def __str__(self) -> str:
        return f"fleet summary at {self.at:%Y-%m-%d %H:%M}"
