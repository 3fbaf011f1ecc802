from django import forms
from django.contrib import admin

from gpuquota.core.errors import DomainError
from reports.models import RateCard
from reports.services import rate_card_change, rate_card_create, rate_card_end

_RATE_FIELDS = ("reserved_rate", "on_demand_rate", "currency")


class RateCardForm(forms.ModelForm):
    """Saves through the rate-card services (audited, re-priced hours marked); their
    refusals become form errors. `user` is set by the admin per request."""

    user = None

    class Meta:
        model = RateCard
        fields = ["gpu_class", "valid_from", "valid_until", *_RATE_FIELDS]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._before = {name: getattr(self.instance, name)
                        for name in ("valid_until", *_RATE_FIELDS)}

    def _post_clean(self):
        super()._post_clean()
        if self.errors:
            return
        try:
            self.instance = self._apply(self.cleaned_data)
        except DomainError as error:
            field = error.field if error.field in self.fields else None
            self.add_error(field, error.message)

    def _apply(self, data: dict) -> RateCard:
        if self.instance._state.adding:
            return rate_card_create(
                gpu_class=data["gpu_class"], valid_from=data["valid_from"],
                valid_until=data.get("valid_until"), reserved_rate=data["reserved_rate"],
                on_demand_rate=data["on_demand_rate"], currency=data["currency"], by=self.user)
        card = RateCard.objects.get(pk=self.instance.pk)
        if data.get("valid_until") != self._before["valid_until"]:
            card = rate_card_end(rate_card=card, at=data.get("valid_until"), by=self.user)
        changed = {name: data[name] for name in _RATE_FIELDS
                   if name in data and data[name] != self._before[name]}
        if changed:
            card = rate_card_change(rate_card=card, by=self.user, **changed)
        return card


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
    """Rate cards change only through `reports.services` (never deleted: end them)."""

    form = RateCardForm
    list_display = [
        "gpu_class",
        "valid_from",
        "valid_until",
        "reserved_rate",
        "on_demand_rate",
        "currency",
    ]
    list_filter = ["gpu_class", "currency"]
    date_hierarchy = "valid_from"

    def get_readonly_fields(self, request, obj=None):
        return ["gpu_class", "valid_from"] if obj is not None else []

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        return type(form.__name__, (form,), {"user": request.user})

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change):
        """Saved by the service during validation (`RateCardForm._post_clean`)."""
