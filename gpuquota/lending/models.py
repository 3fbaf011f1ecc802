from django.conf import settings
from django.db import models
from django.db.models import Q

from gpuquota.core.fields import WholeSecondDateTimeField


class LendingOptOut(models.Model):
    """Lending turned off for one reservation, or for a team's reservations of one class
    (benchmarks, interactive work agreed in advance), from `created_at` until `ended_at`.
    One live opt-out per reservation and per team and class (database constraints)."""

    class Scope(models.TextChoices):
        RESERVATION = "reservation", "One reservation"
        TEAM_CLASS = "team_class", "A team's reservations of a class"

    scope = models.CharField(max_length=16, choices=Scope.choices)
    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="+")
    reservation = models.ForeignKey(
        "reservations.Reservation", null=True, blank=True, on_delete=models.PROTECT,
        related_name="+",
    )
    gpu_class = models.ForeignKey(
        "inventory.GpuClass", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    reason = models.CharField(max_length=256)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = WholeSecondDateTimeField()
    ended_at = WholeSecondDateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
        related_name="+",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(scope="reservation", reservation__isnull=False,
                            gpu_class__isnull=True)
                | Q(scope="team_class", reservation__isnull=True, gpu_class__isnull=False),
                name="lending_optout_scope_valid",
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("created_at")),
                name="lending_optout_interval_valid",
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True, ended_by__isnull=True)
                | Q(ended_at__isnull=False), name="lending_optout_ended_by_valid",
            ),
            models.UniqueConstraint(
                fields=["reservation"], condition=Q(ended_at__isnull=True, scope="reservation"),
                name="lending_optout_one_live_per_reservation",
                violation_error_message="Lending is already off for this reservation.",
            ),
            models.UniqueConstraint(
                fields=["team", "gpu_class"],
                condition=Q(ended_at__isnull=True, scope="team_class"),
                name="lending_optout_one_live_per_team_class",
                violation_error_message="Lending is already off for this team and class.",
            ),
        ]

    def __str__(self) -> str:
        what = f"reservation #{self.reservation_id}" if self.reservation_id else (
            f"{self.team} {self.gpu_class}")
        return f"lending off for {what}"
