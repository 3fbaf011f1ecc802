"""Reclaim recommendations, their GPUs and exemptions (accounting.md, "Reclaim
recommendations"). State changes are in `services.py` and `lifecycle.py`."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from gpuquota.core.fields import WholeSecondDateTimeField

_USER = {"null": True, "blank": True, "on_delete": models.PROTECT, "related_name": "+"}


class Recommendation(models.Model):
    """What the evaluation found on one reservation over a look-back window, and what
    became of it. At most one live (open, accepted, objected) recommendation per
    reservation and kind: re-evaluation updates it, never duplicates it."""

    class Kind(models.TextChoices):
        RECLAIM = "reclaim", "Reclaim idle GPUs"
        RIGHT_SIZE = "right_size", "Right-size"
        COVERAGE_WARNING = "coverage_warning", "Coverage warning"

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        ACCEPTED = "accepted", "Accepted (grace period)"
        OBJECTED = "objected", "Objected (back to the admin)"
        RELEASED = "released", "Released"
        DISMISSED = "dismissed", "Dismissed"
        CLOSED = "closed", "Closed"

    class ObjectionDecision(models.TextChoices):
        NONE = "", "None"
        UPHELD = "upheld", "Upheld (the release goes ahead)"
        WITHDRAWN = "withdrawn", "Withdrawn (the GPUs stay)"

    LIVE = (Status.OPEN, Status.ACCEPTED, Status.OBJECTED)

    reservation = models.ForeignKey(
        "reservations.Reservation", on_delete=models.PROTECT, related_name="recommendations"
    )
    kind = models.CharField(max_length=24, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    gpus = models.ManyToManyField(
        "inventory.Gpu", through="RecommendationGpu", related_name="recommendations"
    )
    target_count = models.PositiveIntegerField(
        null=True, blank=True, help_text="Right-size: the count to shrink to."
    )
    evidence = models.JSONField(
        default=dict, blank=True,
        help_text="Per GPU: busy fraction, mean utilization, peak memory, processes and "
        "owners seen, last busy time; and the concurrency percentile for right-size.",
    )
    savings = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    window_start = WholeSecondDateTimeField()
    window_end = WholeSecondDateTimeField()
    over_quota = models.BooleanField(default=False)
    exemption = models.ForeignKey(
        "Exemption", null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Set: listed only, never acted on.",
    )
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, **_USER)
    accepted_at = WholeSecondDateTimeField(null=True, blank=True)
    grace_until = WholeSecondDateTimeField(
        null=True, blank=True, help_text="The GPUs are released at this instant."
    )
    objection_by = models.ForeignKey(settings.AUTH_USER_MODEL, **_USER)
    objection_at = WholeSecondDateTimeField(null=True, blank=True)
    objection_reason = models.TextField(blank=True)
    objection_decision = models.CharField(
        max_length=16, choices=ObjectionDecision.choices, blank=True, default=""
    )
    objection_decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, **_USER)
    objection_decided_at = WholeSecondDateTimeField(null=True, blank=True)
    objection_decision_reason = models.TextField(blank=True)
    dismissed_by = models.ForeignKey(settings.AUTH_USER_MODEL, **_USER)
    dismissed_at = WholeSecondDateTimeField(null=True, blank=True)
    dismissed_reason = models.TextField(blank=True)
    snoozed_until = WholeSecondDateTimeField(null=True, blank=True)
    released_at = WholeSecondDateTimeField(null=True, blank=True)
    released_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, **_USER, help_text="Empty: the scheduled release."
    )
    closed_at = WholeSecondDateTimeField(null=True, blank=True)
    closed_note = models.TextField(blank=True)
    accept_notified_at = WholeSecondDateTimeField(null=True, blank=True)
    release_notified_at = WholeSecondDateTimeField(null=True, blank=True)
    evaluated_at = WholeSecondDateTimeField()
    created_at = WholeSecondDateTimeField()
    updated_at = WholeSecondDateTimeField()

    class Meta:
        ordering = ["-over_quota", F("savings").desc(nulls_last=True), "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=["reclaim", "right_size", "coverage_warning"]),
                name="recommendation_kind_valid",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[
                    "open", "accepted", "objected", "released", "dismissed", "closed"]),
                name="recommendation_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(objection_decision__in=["", "upheld", "withdrawn"]),
                name="recommendation_objection_decision_valid",
            ),
            models.CheckConstraint(
                condition=Q(window_end__gt=F("window_start")),
                name="recommendation_window_valid",
            ),
            models.CheckConstraint(
                condition=~Q(status__in=["accepted", "objected", "released"])
                | (Q(accepted_at__isnull=False) & Q(grace_until__isnull=False)),
                name="recommendation_accepted_has_grace",
            ),
            models.CheckConstraint(
                condition=~Q(kind="coverage_warning")
                | Q(status__in=["open", "dismissed", "closed"]),
                name="recommendation_warning_not_actionable",
            ),
            models.CheckConstraint(
                condition=~Q(kind="right_size") | Q(target_count__isnull=False),
                name="recommendation_right_size_has_target",
            ),
            models.UniqueConstraint(
                fields=["reservation", "kind"],
                condition=Q(status__in=["open", "accepted", "objected"]),
                name="recommendation_one_live_per_kind",
            ),
        ]
        indexes = [models.Index(fields=["status", "grace_until"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} on reservation #{self.reservation_id} ({self.status})"


class RecommendationGpu(models.Model):
    """One GPU a recommendation concerns, with its own release state, so a release
    interrupted half-way resumes exactly where it stopped."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        RELEASED = "released", "Released"
        SKIPPED = "skipped", "Skipped (busy again)"

    recommendation = models.ForeignKey(
        Recommendation, on_delete=models.PROTECT, related_name="gpu_rows"
    )
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    released_at = WholeSecondDateTimeField(null=True, blank=True)
    note = models.CharField(max_length=256, blank=True)

    class Meta:
        ordering = ["recommendation", "gpu"]
        constraints = [
            models.UniqueConstraint(
                fields=["recommendation", "gpu"], name="recommendation_gpu_unique"
            ),
            models.CheckConstraint(
                condition=Q(state__in=["pending", "released", "skipped"]),
                name="recommendation_gpu_state_valid",
            ),
            models.CheckConstraint(
                condition=~Q(state="released") | Q(released_at__isnull=False),
                name="recommendation_gpu_released_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} of recommendation #{self.recommendation_id} ({self.state})"


class Exemption(models.Model):
    """Not to be reclaimed until `until`: one reservation, or every reservation of a
    team in a GPU class (benchmarks, interactive work agreed in advance)."""

    reservation = models.ForeignKey(
        "reservations.Reservation", null=True, blank=True, on_delete=models.PROTECT,
        related_name="reclaim_exemptions",
    )
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.PROTECT,
        related_name="reclaim_exemptions",
    )
    gpu_class = models.ForeignKey(
        "inventory.GpuClass", null=True, blank=True, on_delete=models.PROTECT,
        related_name="reclaim_exemptions",
    )
    reason = models.TextField()
    until = WholeSecondDateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = WholeSecondDateTimeField()

    class Meta:
        ordering = ["-until", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(reservation__isnull=False, team__isnull=True, gpu_class__isnull=True)
                    | Q(reservation__isnull=True, team__isnull=False, gpu_class__isnull=False)
                ),
                name="exemption_reservation_or_team_class",
            ),
            models.CheckConstraint(
                condition=~Q(reason=""), name="exemption_reason_required"
            ),
        ]

    def __str__(self) -> str:
        target = (f"reservation #{self.reservation_id}" if self.reservation_id
                  else f"{self.team} {self.gpu_class}")
        return f"Exempt {target} until {self.until:%Y-%m-%d}"
