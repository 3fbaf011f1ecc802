from django.contrib import admin

from gpuquota.core.admin import ReadOnlyAdmin, ServiceAdminMixin, ServiceModelForm
from gpuquota.core.services import audit_record
from gpuquota.rates.models import CarbonIntensityHour, ClusterEnergyFactor, RateCard
from gpuquota.rates.services import rate_card_change, rate_card_create, rate_card_end

_RATE_FIELDS = ("reserved_rate", "on_demand_rate", "borrowed_rate", "currency")


class RateCardForm(ServiceModelForm):
    """Saves through the rate-card services (audited, re-priced hours marked)."""

    class Meta:
        model = RateCard
        fields = ["gpu_class", "valid_from", "valid_until", *_RATE_FIELDS]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["borrowed_rate"].required = False
        self.fields["borrowed_rate"].help_text += " Empty on a new card: its on-demand rate."
        self._before = {name: getattr(self.instance, name)
                        for name in ("valid_until", *_RATE_FIELDS)}

    def apply(self, data: dict) -> RateCard:
        if self.instance._state.adding:
            return rate_card_create(
                gpu_class=data["gpu_class"], valid_from=data["valid_from"],
                valid_until=data.get("valid_until"), reserved_rate=data["reserved_rate"],
                on_demand_rate=data["on_demand_rate"], borrowed_rate=data.get("borrowed_rate"),
                currency=data["currency"], by=self.user)
        card = RateCard.objects.get(pk=self.instance.pk)
        if data.get("valid_until") != self._before["valid_until"]:
            card = rate_card_end(rate_card=card, at=data.get("valid_until"), by=self.user)
        changed = {name: data[name] for name in _RATE_FIELDS
                   if data.get(name) is not None and data[name] != self._before[name]}
        if changed:
            card = rate_card_change(rate_card=card, by=self.user, **changed)
        return card


@admin.register(RateCard)
class RateCardAdmin(ServiceAdminMixin, admin.ModelAdmin):
    """Rate cards change only through `gpuquota.rates.services` (never deleted: end them)."""

    form = RateCardForm
    list_display = [
        "gpu_class",
        "valid_from",
        "valid_until",
        "reserved_rate",
        "on_demand_rate",
        "borrowed_rate",
        "currency",
    ]
    list_filter = ["gpu_class", "currency"]
    date_hierarchy = "valid_from"

    def get_readonly_fields(self, request, obj=None):
        return ["gpu_class", "valid_from"] if obj is not None else []

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ClusterEnergyFactor)
class ClusterEnergyFactorAdmin(admin.ModelAdmin):
    """PUE and static carbon intensity per cluster with effective dates (audited; never
    deleted: end one and add the next). Statements keep the figures they were drafted with."""

    list_display = ["cluster", "valid_from", "valid_until", "pue", "carbon_intensity", "source"]
    list_filter = ["cluster"]
    date_hierarchy = "valid_from"

    def get_readonly_fields(self, request, obj=None):
        return ["cluster", "valid_from"] if obj is not None else []

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit_record(actor=request.user, action="energy_factor.save", obj=obj,
                     changes={name: str(form.cleaned_data.get(name))
                              for name in form.changed_data})

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(CarbonIntensityHour)
class CarbonIntensityHourAdmin(ReadOnlyAdmin):
    """Imported hourly figures (`manage.py carbon_intensity_import`): browse only."""

    list_display = ["cluster", "hour", "carbon_intensity", "source"]
    list_filter = ["cluster", "source"]
    date_hierarchy = "hour"
