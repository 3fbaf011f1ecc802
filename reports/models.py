from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from gpuquota.core.fields import WholeSecondDateTimeField

# the admins' and users' channels live in a module of their own; Django finds them here
from reports.channel_models import AdminChannel, ChannelBase, ChannelKind, UserChannel  # noqa: F401


class Statement(models.Model):
    """A team's chargeback statement for one calendar month (UTC): a draft recomputed on
    demand, then approved (frozen, in the database itself), then sent. Team and line
    fields are snapshots so renames never change an approved statement."""

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        APPROVED = "approved", "Approved"
        SENT = "sent", "Sent"

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="statements")
    month = models.DateField(help_text="First day of the month (UTC).")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    currency = models.CharField(max_length=3, blank=True, help_text="Empty on a failed draft.")
    total = models.DecimalField(max_digits=14, decimal_places=2, default=Decimal("0.00"))
    team_name = models.CharField(max_length=120)
    team_slug = models.CharField(max_length=64)
    cost_center = models.CharField(max_length=64, blank=True)
    reserved_s = models.BigIntegerField(default=0)
    covered_s = models.BigIntegerField(default=0)
    busy_s = models.BigIntegerField(default=0)
    lent_s = models.BigIntegerField(
        default=0, help_text="Seconds its GPUs were lent and not failed (accounting.md, Lending).")
    lent_busy_s = models.BigIntegerField(
        default=0, help_text="Borrowed busy seconds on its lent GPUs, attributed or not.")
    computed_at = WholeSecondDateTimeField(help_text="When the figures were computed.")
    computed_until = WholeSecondDateTimeField(
        help_text="The figures cover [month start, this): the month's end, or 'to date'."
    )
    error = models.TextField(
        blank=True, help_text="Why the draft failed (names the class and interval)."
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
        related_name="+", help_text="Empty when approved by the system.",
    )
    approved_at = WholeSecondDateTimeField(null=True, blank=True)
    sent_at = WholeSecondDateTimeField(null=True, blank=True)
    number = models.CharField(
        max_length=32, null=True, blank=True, unique=True,
        help_text="The statement's number finance books, e.g. GQ-2026-11-0007 (prefix, the "
        "statement's month, a sequence within it), given once at approval; never changes.")
    daily_usage = models.JSONField(
        null=True, blank=True,
        help_text="The PDF chart's reserved and busy GPU-seconds per UTC day, frozen at "
                  "approval ([{day, reserved_s, busy_s}], busy_s an exact fraction); "
                  "empty on a draft, whose chart reads the usage as it is now.")
    energy_basis = models.JSONField(
        default=list, blank=True,
        help_text="What the lines' facility energy and CO2e were computed with, kept when "
                  "drafted: per cluster its PUE and intensity factors (with source and "
                  "dates), the hours of imported hourly intensity, the hours without a "
                  "factor (reports/carbon.py).")

    class Meta:
        ordering = ["-month", "team_name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "month"], name="statement_one_per_team_month"),
            models.CheckConstraint(
                condition=Q(status__in=["draft", "approved", "sent"]), name="statement_status_valid"
            ),
            models.CheckConstraint(condition=Q(month__day=1), name="statement_month_first_day"),
            models.CheckConstraint(
                condition=Q(status="draft")
                | (Q(approved_at__isnull=False) & Q(error="") & ~Q(currency="")),
                name="statement_approved_complete",
                violation_error_message="Only a complete draft (no error) can be approved.",
            ),
            models.CheckConstraint(
                condition=~Q(status="sent") | Q(sent_at__isnull=False), name="statement_sent_at"
            ),
            models.CheckConstraint(
                condition=Q(reserved_s__gte=0) & Q(covered_s__gte=0) & Q(busy_s__gte=0)
                & Q(lent_s__gte=0) & Q(lent_busy_s__gte=0),
                name="statement_seconds_non_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team_name} {self.month:%Y-%m} ({self.status})"

    @property
    def period_label(self) -> str:
        return f"{self.month:%Y-%m}"


class StatementLine(models.Model):
    """One line: a kind, a class and one rate (a rate change splits a line), its integer
    seconds and its amount, rounded once (accounting.md: Chargeback)."""

    class Kind(models.TextChoices):
        RESERVED = "reserved", "Reserved"
        FAILURE_CREDIT = "failure_credit", "Failure credit"
        ON_DEMAND = "on_demand", "On demand"
        BORROWED = "borrowed", "Borrowed"
        LENDING_CREDIT = "lending_credit", "Lending credit"
        ADJUSTMENT = "adjustment", "Adjustment"

    statement = models.ForeignKey(Statement, on_delete=models.CASCADE, related_name="lines")
    position = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    gpu_class = models.ForeignKey(
        "inventory.GpuClass", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    gpu_class_name = models.CharField(max_length=120, blank=True)
    seconds = models.BigIntegerField(null=True, blank=True)
    # 8 places: a lending credit's rate is a card's rate (4 places) times a share (4 places)
    rate = models.DecimalField(max_digits=16, decimal_places=8, null=True, blank=True)
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    reason = models.TextField(blank=True)
    adjustment = models.ForeignKey(
        "Adjustment", null=True, blank=True, on_delete=models.PROTECT, related_name="lines"
    )
    energy_kwh = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True,
        help_text="The energy of the line's team, class and kind of time, shared among its "
                  "lines by seconds (docs/budgets.md, Energy): information, never priced. "
                  "Empty on credits, adjustments and lines drafted before energy was kept.")
    facility_energy_kwh = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True,
        help_text="The line's energy × its clusters' PUE, hour by hour (docs/accounting.md, "
                  "Energy). Empty where some hour had no PUE and intensity.")
    co2e_kg = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True,
        help_text="kg CO2e: facility kWh × the carbon intensity of each hour.")
    idle_energy_kwh = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True,
        help_text="Reserved lines: the part of the energy of reserved GPUs' idle seconds.")
    idle_co2e_kg = models.DecimalField(
        max_digits=14, decimal_places=3, null=True, blank=True,
        help_text="Reserved lines: the kg CO2e of the idle-reserved energy.")

    class Meta:
        ordering = ["statement", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["statement", "position"], name="statement_line_position"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["reserved", "failure_credit", "on_demand", "borrowed",
                                      "lending_credit", "adjustment"]),
                name="statement_line_kind_valid",
            ),
            models.CheckConstraint(
                condition=(
                    Q(kind="adjustment", seconds__isnull=True, rate__isnull=True,
                      gpu_class_name="")
                    | (~Q(kind="adjustment") & Q(seconds__gt=0, rate__isnull=False))
                ),
                name="statement_line_shape",
                violation_error_message="Adjustments carry no class, seconds or rate; other "
                "lines carry positive seconds and a rate.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.gpu_class_name} {self.amount}"


class Adjustment(models.Model):
    """A signed amount with a reason, added by an admin to a month not yet approved.
    `corrects` names the approved statement whose late usage it settles, if any."""

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="adjustments")
    month = models.DateField(help_text="First day of the month (UTC) it is billed in.")
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    reason = models.TextField()
    corrects = models.ForeignKey(
        Statement, null=True, blank=True, on_delete=models.PROTECT,
        related_name="late_adjustments", help_text="The approved statement it settles.",
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                   related_name="+")
    created_at = WholeSecondDateTimeField()

    class Meta:
        ordering = ["month", "created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(month__day=1), name="adjustment_month_first_day"),
            models.CheckConstraint(condition=~Q(amount=0), name="adjustment_amount_non_zero"),
            models.CheckConstraint(condition=~Q(reason=""), name="adjustment_reason_required"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.month:%Y-%m} {self.amount}"


class LateUsageCheck(models.Model):
    """What the last late-usage scan found for an approved or sent statement: the amount
    still to settle (0: nothing late) or why the month cannot be priced now. It lets the
    review page list the late usage of months it does not price itself; the statement's
    own figures never change."""

    statement = models.OneToOneField(Statement, on_delete=models.CASCADE,
                                     related_name="late_check")
    difference = models.DecimalField(max_digits=14, decimal_places=2)
    error = models.TextField(blank=True)
    checked_at = WholeSecondDateTimeField()

    def __str__(self) -> str:
        return f"{self.statement} late {self.difference}"


class Budget(models.Model):
    """A team's monthly budget in money, in force from the month `valid_from` until the
    team's next budget row (effective dates by month: a new row supersedes, none is edited
    away). `thresholds` are percentages of the month's actual spend to date, each alerting
    once per month; `forecast_threshold` (or None) alerts once when the month-end forecast
    reaches it (docs/budgets.md)."""

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="budgets")
    valid_from = models.DateField(help_text="First day of the first month it applies to.")
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3)
    thresholds = models.JSONField(default=list, help_text="Percent of actual spend, e.g. "
                                  "[50, 80, 100].")
    forecast_threshold = models.PositiveSmallIntegerField(null=True, blank=True, default=100)

    class Action(models.TextChoices):
        NOTIFY = "notify", "Notify only"
        REFUSE = "refuse", "Refuse reservations that would exceed it"
        PREEMPTIBLE_ONLY = "preemptible_only", "Preemptible only once spent"

    action = models.CharField(
        max_length=16, choices=Action.choices, default=Action.NOTIFY,
        help_text="At 100 %: notify; refuse new reservations that would take the forecast "
        "over; or, once spent, no new reservations (borrowing goes on). Running work is "
        "never stopped (docs/budgets.md, Actions at 100 %).")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                   related_name="+")
    created_at = WholeSecondDateTimeField()

    class Meta:
        ordering = ["team", "-valid_from"]
        constraints = [
            models.UniqueConstraint(fields=["team", "valid_from"], name="budget_one_per_start"),
            models.CheckConstraint(condition=Q(valid_from__day=1), name="budget_month_first_day"),
            models.CheckConstraint(condition=Q(amount__gte=0), name="budget_amount_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.team} from {self.valid_from:%Y-%m}: {self.amount} {self.currency}"


class BudgetAlert(models.Model):
    """A threshold of a team's month that has fired: the unique constraint is what makes it
    fire once per period, whoever checks and however often."""

    class Basis(models.TextChoices):
        ACTUAL = "actual", "Spend to date"
        FORECAST = "forecast", "Month-end forecast"

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="+")
    budget = models.ForeignKey(Budget, on_delete=models.PROTECT, related_name="alerts")
    month = models.DateField()
    basis = models.CharField(max_length=16, choices=Basis.choices)
    threshold = models.PositiveSmallIntegerField()
    spent = models.DecimalField(max_digits=14, decimal_places=2,
                                help_text="The figure that crossed it (to date or forecast).")
    fired_at = WholeSecondDateTimeField()

    class Meta:
        ordering = ["-month", "basis", "threshold"]
        constraints = [
            models.UniqueConstraint(fields=["team", "month", "basis", "threshold"],
                                    name="budget_alert_once_per_month"),
            models.CheckConstraint(condition=Q(basis__in=["actual", "forecast"]),
                                   name="budget_alert_basis_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.month:%Y-%m} {self.basis} {self.threshold}%"


class ClassHoursBudget(models.Model):
    """A team's monthly budget in GPU-hours of one GPU class, with effective dates by month
    as `Budget`'s (a later row supersedes; one set again for the same month replaces it),
    the same thresholds and the same action at 100 % (docs/budgets.md)."""

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT,
                             related_name="class_hour_budgets")
    gpu_class = models.ForeignKey("inventory.GpuClass", on_delete=models.PROTECT,
                                  related_name="+")
    valid_from = models.DateField(help_text="First day of the first month it applies to.")
    hours = models.DecimalField(max_digits=12, decimal_places=2,
                                help_text="GPU-hours of the class a month.")
    thresholds = models.JSONField(default=list, help_text="Percent of the GPU-hours used to "
                                  "date, e.g. [50, 80, 100].")
    forecast_threshold = models.PositiveSmallIntegerField(null=True, blank=True, default=100)
    action = models.CharField(max_length=16, choices=Budget.Action.choices,
                              default=Budget.Action.NOTIFY)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                   related_name="+")
    created_at = WholeSecondDateTimeField()

    class Meta:
        ordering = ["team", "gpu_class", "-valid_from"]
        constraints = [
            models.UniqueConstraint(fields=["team", "gpu_class", "valid_from"],
                                    name="class_hours_budget_one_per_start"),
            models.CheckConstraint(condition=Q(valid_from__day=1),
                                   name="class_hours_budget_month_first_day"),
            models.CheckConstraint(condition=Q(hours__gte=0),
                                   name="class_hours_budget_hours_non_negative"),
            models.CheckConstraint(condition=Q(action__in=["notify", "refuse",
                                                           "preemptible_only"]),
                                   name="class_hours_budget_action_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.gpu_class} from {self.valid_from:%Y-%m}: {self.hours} h"


class ClassHoursAlert(models.Model):
    """A threshold of a class GPU-hour budget that has fired, once per team, class, month,
    basis and threshold (the unique constraint)."""

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="+")
    gpu_class = models.ForeignKey("inventory.GpuClass", on_delete=models.PROTECT,
                                  related_name="+")
    budget = models.ForeignKey(ClassHoursBudget, on_delete=models.PROTECT,
                               related_name="alerts")
    month = models.DateField()
    basis = models.CharField(max_length=16, choices=BudgetAlert.Basis.choices)
    threshold = models.PositiveSmallIntegerField()
    hours = models.DecimalField(max_digits=12, decimal_places=2,
                                help_text="The GPU-hours that crossed it (to date or forecast).")
    fired_at = WholeSecondDateTimeField()

    class Meta:
        ordering = ["-month", "gpu_class", "basis", "threshold"]
        constraints = [
            models.UniqueConstraint(fields=["team", "gpu_class", "month", "basis", "threshold"],
                                    name="class_hours_alert_once_per_month"),
            models.CheckConstraint(condition=Q(basis__in=["actual", "forecast"]),
                                   name="class_hours_alert_basis_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.gpu_class} {self.month:%Y-%m} {self.basis} {self.threshold}%"


class TeamChannel(ChannelBase):
    """Where a team's notifications go besides mail: a Slack or Teams incoming webhook, or a
    generic webhook signed per Standard Webhooks (`reports.channel_models.ChannelBase`)."""

    Kind = ChannelKind
    TARGET_PREFIX = "team-channel"

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="channels")
    events = models.JSONField(
        default=list, blank=True,
        help_text="The event types it hears (gpuquota.outbox.events.TEAM_EVENTS); empty: all.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT,
                                   related_name="+")

    class Meta:
        ordering = ["team", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="team_channel_name_unique"),
            models.CheckConstraint(condition=Q(kind__in=["slack", "teams", "webhook"]),
                                   name="team_channel_kind_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.kind} {self.name}"

