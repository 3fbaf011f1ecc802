from django.contrib import admin

from reports.models import RateCard


@admin.register(RateCard)
class RateCardAdmin(admin.ModelAdmin):
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
