from django.core.validators import RegexValidator
from django.db import models
from django.db.models import F, Q

from gpuquota.core.constraints import NoOverlap
from gpuquota.core.fields import WholeSecondDateTimeField


class RateCard(models.Model):
    """Prices of one GPU class over [valid_from, valid_until); never overlapping per class.
    Rates are per GPU-hour, stored exactly (up to 4 decimals)."""

    gpu_class = models.ForeignKey(
        "inventory.GpuClass", on_delete=models.PROTECT, related_name="rate_cards"
    )
    valid_from = WholeSecondDateTimeField()
    valid_until = WholeSecondDateTimeField(null=True, blank=True)
    reserved_rate = models.DecimalField(
        max_digits=12, decimal_places=4, help_text="Per reserved GPU-hour."
    )
    on_demand_rate = models.DecimalField(
        max_digits=12, decimal_places=4, help_text="Per busy unreserved GPU-hour."
    )
    borrowed_rate = models.DecimalField(
        max_digits=12, decimal_places=4,
        help_text="Per borrowed busy GPU-hour: a lent GPU's busy time, paid by the borrowers.",
    )
    currency = models.CharField(
        max_length=3, default="USD", validators=[RegexValidator(r"^[A-Z]{3}$", "ISO 4217 code")]
    )

    class Meta:
        # The table kept its name when the model moved here from `reports` (issue 20 §6).
        db_table = "reports_ratecard"
        ordering = ["gpu_class__name", "valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(valid_until__isnull=True) | Q(valid_until__gt=F("valid_from")),
                name="rate_card_interval_valid",
            ),
            models.CheckConstraint(
                condition=Q(reserved_rate__gte=0) & Q(on_demand_rate__gte=0)
                & Q(borrowed_rate__gte=0),
                name="rate_card_rates_non_negative",
            ),
            NoOverlap(
                name="rate_card_no_overlap",
                key=["gpu_class"],
                violation_error_message="Rate cards of one class cannot overlap.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_class} from {self.valid_from:%Y-%m-%d}"


class ClusterEnergyFactor(models.Model):
    """A cluster's facility over [valid_from, valid_until) (docs/accounting.md, Energy):
    its PUE (facility energy ÷ IT energy) and the carbon intensity of its electricity, a
    static value used for every hour without an imported figure (`CarbonIntensityHour`).
    Never overlapping per cluster. Information only: no amount uses it."""

    cluster = models.ForeignKey(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="energy_factors"
    )
    valid_from = WholeSecondDateTimeField()
    valid_until = WholeSecondDateTimeField(null=True, blank=True)
    pue = models.DecimalField(
        max_digits=5, decimal_places=3,
        help_text="Power usage effectiveness: facility energy ÷ IT energy (1.000 or more).",
    )
    carbon_intensity = models.DecimalField(
        max_digits=8, decimal_places=2,
        help_text="g CO2e per facility kWh, for hours without an imported hourly figure.",
    )
    source = models.CharField(
        max_length=200, help_text="Where the intensity comes from, printed on the statement."
    )

    class Meta:
        ordering = ["cluster__name", "valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(valid_until__isnull=True) | Q(valid_until__gt=F("valid_from")),
                name="energy_factor_interval_valid",
            ),
            models.CheckConstraint(
                condition=Q(pue__gte=1) & Q(carbon_intensity__gte=0),
                name="energy_factor_values_valid",
            ),
            NoOverlap(
                name="energy_factor_no_overlap",
                key=["cluster"],
                violation_error_message="A cluster's energy factors cannot overlap.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} from {self.valid_from:%Y-%m-%d}"


class CarbonIntensityHour(models.Model):
    """An imported carbon intensity of a cluster's electricity over one UTC hour
    (`manage.py carbon_intensity_import`): it replaces the static intensity of the factor in
    force for that hour; the PUE stays the factor's."""

    cluster = models.ForeignKey(
        "inventory.Cluster", on_delete=models.PROTECT, related_name="carbon_hours"
    )
    hour = WholeSecondDateTimeField(help_text="The UTC hour's start.")
    carbon_intensity = models.DecimalField(max_digits=8, decimal_places=2,
                                           help_text="g CO2e per kWh.")
    source = models.CharField(max_length=200)

    class Meta:
        ordering = ["cluster__name", "hour"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "hour"], name="carbon_hour_unique"),
            models.CheckConstraint(condition=Q(carbon_intensity__gte=0),
                                   name="carbon_hour_intensity_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster} {self.hour:%Y-%m-%d %H}:00"
