from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.models import Team
from gpuquota.reservations.models import Quota


def quotas_current(*, team: Team, at: datetime | None = None) -> QuerySet[Quota]:
    """The team's quota rows in force at `at` (default now), per class."""
    at = at or timezone.now()
    return (
        Quota.objects.filter(team=team, valid_from__lte=at)
        .filter(Q(valid_until__isnull=True) | Q(valid_until__gt=at))
        .select_related("gpu_class")
        .order_by("gpu_class__name")
    )
