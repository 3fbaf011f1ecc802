from django.conf import settings
from django.db import models
from django.db.models import F, Q

from gpuquota.core.constraints import NoOverlap
from gpuquota.core.fields import WholeSecondDateTimeField


class Quota(models.Model):
    """GPUs of a class a team is guaranteed concurrently over [valid_from, valid_until).
    Rows of one team and class never overlap; no row means quota 0."""

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="quotas")
    gpu_class = models.ForeignKey(
        "inventory.GpuClass", on_delete=models.PROTECT, related_name="quotas"
    )
    gpus = models.PositiveIntegerField()
    valid_from = WholeSecondDateTimeField()
    valid_until = WholeSecondDateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["team__name", "gpu_class__name", "valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(valid_until__isnull=True) | Q(valid_until__gt=F("valid_from")),
                name="quota_interval_valid",
            ),
            NoOverlap(
                name="quota_no_overlap",
                key=["team", "gpu_class"],
                violation_error_message="Quota rows of one team and class cannot overlap.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team}: {self.gpus} × {self.gpu_class}"


class Reservation(models.Model):
    """A team's request for `count` GPUs of a class over [start, end)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending approval"
        SCHEDULED = "scheduled", "Scheduled"
        ACTIVE = "active", "Active"
        ENDED = "ended", "Ended"
        CANCELLED = "cancelled", "Cancelled"
        DENIED = "denied", "Denied"

    class Placement(models.TextChoices):
        ANY = "any", "Any node (packed)"
        SAME_NODE = "same_node", "All on one node"

    team = models.ForeignKey(
        "accounts.Team", on_delete=models.PROTECT, related_name="reservations"
    )
    gpu_class = models.ForeignKey(
        "inventory.GpuClass", on_delete=models.PROTECT, related_name="reservations"
    )
    count = models.PositiveIntegerField()
    start = WholeSecondDateTimeField()
    end = WholeSecondDateTimeField()
    placement = models.CharField(max_length=16, choices=Placement.choices, default=Placement.ANY)
    status = models.CharField(max_length=16, choices=Status.choices, db_index=True)
    over_quota = models.BooleanField(default=False)
    is_backfill = models.BooleanField(default=False)
    purpose = models.CharField(max_length=256, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    requested_at = WholeSecondDateTimeField()
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    approved_at = WholeSecondDateTimeField(
        null=True, blank=True, help_text="Over-quota requests are charged from max(start, this)."
    )
    decision_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-start", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    status__in=["pending", "scheduled", "active", "ended", "cancelled", "denied"]
                ),
                name="reservation_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(placement__in=["any", "same_node"]), name="reservation_placement_valid"
            ),
            models.CheckConstraint(condition=Q(count__gte=1), name="reservation_count_positive"),
            models.CheckConstraint(
                condition=Q(end__gt=F("start")), name="reservation_window_valid"
            ),
        ]
        indexes = [models.Index(fields=["gpu_class", "start", "end"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.team} {self.count}×{self.gpu_class}"


class Assignment(models.Model):
    """One GPU assigned to one reservation over [assigned_from, assigned_until).
    A GPU never has two overlapping assignments (database constraint)."""

    class EndReason(models.TextChoices):
        SCHEDULED = "scheduled", "Reservation end"
        RELEASED = "released", "Released early"
        CANCELLED = "cancelled", "Cancelled before start"
        SHRUNK = "shrunk", "Reservation shrunk"
        SWAPPED = "swapped", "Swapped for another GPU"
        RECLAIMED = "reclaimed", "Reclaimed (idle)"

    reservation = models.ForeignKey(
        Reservation, on_delete=models.PROTECT, related_name="assignments"
    )
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="assignments")
    assigned_from = WholeSecondDateTimeField()
    assigned_until = WholeSecondDateTimeField()
    end_reason = models.CharField(
        max_length=16, choices=EndReason.choices, default=EndReason.SCHEDULED
    )

    class Meta:
        ordering = ["reservation", "gpu"]
        constraints = [
            models.CheckConstraint(
                condition=Q(assigned_until__gte=F("assigned_from")),
                name="assignment_interval_valid",
            ),
            models.CheckConstraint(
                condition=Q(
                    end_reason__in=[
                        "scheduled", "released", "cancelled", "shrunk", "swapped", "reclaimed"
                    ]
                ),
                name="assignment_end_reason_valid",
            ),
            NoOverlap(
                name="assignment_no_double_booking",
                key=["gpu"],
                start="assigned_from",
                end="assigned_until",
                violation_error_message="This GPU is already assigned in that window.",
            ),
        ]
        indexes = [models.Index(fields=["gpu", "assigned_from", "assigned_until"])]

    def __str__(self) -> str:
        return f"{self.gpu} → reservation #{self.reservation_id}"


class Loan(models.Model):
    """One assigned GPU lent to the fleet's preemptible pool over [lent_from, returned_at).

    The reservation and its assignment do not change: the reserving team is still charged its
    reserved seconds (accounting.md, Lending). An open loan (`returned_at` empty) ends at the
    latest with its assignment. `returned_at` is when the return was asked for (or the
    assignment ended, or the GPU failed); `freed_at` is when the scheduler backend saw the GPU
    free of borrowers, so `freed_at - returned_at` is the time-to-return.
    The database refuses a GPU lent twice at once and a loan outside its own assignment.
    """

    class EndReason(models.TextChoices):
        OWNER_JOB = "owner_job", "A job of the reserving team"
        OWNER_ASK = "owner_ask", "Returned by the reserving team"
        ASSIGNMENT_END = "assignment_end", "The assignment ended"
        GPU_FAILED = "gpu_failed", "The GPU failed"
        LENDING_OFF = "lending_off", "Lending turned off"
        ADMIN = "admin", "Returned by an admin"

    assignment = models.ForeignKey(Assignment, on_delete=models.PROTECT, related_name="loans")
    gpu = models.ForeignKey("inventory.Gpu", on_delete=models.PROTECT, related_name="loans")
    lent_from = WholeSecondDateTimeField()
    returned_at = WholeSecondDateTimeField(null=True, blank=True)
    freed_at = WholeSecondDateTimeField(
        null=True, blank=True, help_text="When the scheduler saw the GPU free of borrowers."
    )
    end_reason = models.CharField(max_length=16, choices=EndReason.choices, blank=True)
    lent_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
        related_name="+", help_text="Empty: lent by the lending policy.",
    )
    lend_reason = models.CharField(max_length=256, blank=True)
    returned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
        related_name="+",
    )
    preempt_notified_at = WholeSecondDateTimeField(
        null=True, blank=True, help_text="When the borrowers' leads were told of the return.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-lent_from", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(returned_at__isnull=True) | Q(returned_at__gt=F("lent_from")),
                name="loan_interval_valid",
            ),
            models.CheckConstraint(
                condition=Q(freed_at__isnull=True)
                | Q(returned_at__isnull=False, freed_at__gte=F("returned_at")),
                name="loan_freed_after_return",
            ),
            models.CheckConstraint(
                condition=Q(returned_at__isnull=True, end_reason="")
                | Q(
                    returned_at__isnull=False,
                    end_reason__in=[
                        "owner_job", "owner_ask", "assignment_end", "gpu_failed",
                        "lending_off", "admin",
                    ],
                ),
                name="loan_end_reason_valid",
            ),
            NoOverlap(
                name="loan_gpu_no_overlap",
                key=["gpu"],
                start="lent_from",
                end="returned_at",
                violation_error_message="This GPU is already lent in that window.",
            ),
        ]
        indexes = [models.Index(fields=["gpu", "lent_from"])]

    def __str__(self) -> str:
        return f"{self.gpu} lent from reservation assignment #{self.assignment_id}"
