"""What the reservations app puts on the admin's home page (`gpuquota.core.attention`)."""

from datetime import datetime

from django.urls import reverse

from gpuquota.core.attention import Attention
from gpuquota.core.timeutil import instant_text
from gpuquota.reservations.models import Reservation


def approvals_attention(now: datetime) -> list[Attention]:
    """Requests beyond quota waiting for an admin's decision, the oldest first in line."""
    pending = Reservation.objects.filter(status=Reservation.Status.PENDING)
    count = pending.count()
    oldest = pending.order_by("requested_at").values_list("requested_at", flat=True).first()
    return [Attention(key="approvals", label="Reservations waiting for approval", count=count,
                      url=reverse("reservation_pending"), order=10,
                      detail=f"the oldest asked {instant_text(oldest)}" if oldest else "")]
