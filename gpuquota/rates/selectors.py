"""Reads of rate cards."""

from django.db.models import QuerySet

from gpuquota.inventory.models import GpuClass
from gpuquota.rates.models import RateCard


def rate_cards_listed(*, gpu_class: GpuClass | None = None) -> QuerySet[RateCard]:
    """Rate cards by class and start, of one class if given."""
    cards = RateCard.objects.select_related("gpu_class").order_by("gpu_class__name",
                                                                   "valid_from")
    return cards.filter(gpu_class=gpu_class) if gpu_class is not None else cards
