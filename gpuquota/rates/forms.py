"""The rate-card page's forms: a new card, and the list's filter by class."""

from django import forms

from gpuquota.core.forms import LocalDateTimeField
from gpuquota.inventory.models import GpuClass


class RateCardForm(forms.Form):
    gpu_class = forms.ModelChoiceField(queryset=GpuClass.objects.order_by("name"),
                                       empty_label=None, label="GPU class")
    reserved_rate = forms.DecimalField(label="Reserved rate (per GPU-hour)", min_value=0,
                                       decimal_places=4, max_digits=12)
    on_demand_rate = forms.DecimalField(label="On-demand rate (per busy GPU-hour)",
                                        min_value=0, decimal_places=4, max_digits=12)
    borrowed_rate = forms.DecimalField(
        label="Borrowed rate (per borrowed busy GPU-hour)", min_value=0, decimal_places=4,
        max_digits=12, required=False,
        help_text="What borrowers pay for a lent GPU's busy time. Empty: the on-demand rate.")
    currency = forms.CharField(max_length=3, initial="USD")
    valid_from = LocalDateTimeField(label="From")
    valid_until = LocalDateTimeField(label="Until", required=False,
                                     help_text="Empty: until further notice.")
    reason = forms.CharField(max_length=500, required=False)


class RateCardFilterForm(forms.Form):
    gpu_class = forms.ModelChoiceField(queryset=GpuClass.objects.order_by("name"),
                                       required=False, to_field_name="name",
                                       empty_label="All classes", label="GPU class")
