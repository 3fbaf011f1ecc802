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
