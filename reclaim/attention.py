"""What reclaim puts on the admin's home page (`gpuquota.core.attention`): objections
waiting for a decision, and open recommendations (as the review page lists them)."""

from datetime import datetime
from decimal import Decimal

from django.db.models import Sum
from django.urls import reverse

from gpuquota.core.attention import Attention
from reclaim.models import Recommendation

R, K = Recommendation.Status, Recommendation.Kind


def reclaim_attention(now: datetime) -> list[Attention]:
    """Objections (a lead wants the GPUs kept) and open, actionable recommendations with
    the savings they name."""
    review = reverse("reclaim_review")
    objections = Recommendation.objects.filter(status=R.OBJECTED).count()
    open_recs = Recommendation.objects.filter(
        status=R.OPEN, kind__in=[K.RECLAIM, K.RIGHT_SIZE], exemption__isnull=True)
    savings = (open_recs.values("currency").annotate(total=Sum("savings"))
               .order_by("currency"))
    detail = " · ".join(f"saves {row['total'] or Decimal(0):,.2f} {row['currency']}"
                        for row in savings if row["currency"])
    return [
        Attention(key="objections", label="Reclaim objections to decide",
                  count=objections, url=f"{review}#objected", order=30),
        Attention(key="recommendations", label="Open reclaim recommendations",
                  count=open_recs.count(), url=f"{review}#open", order=35, detail=detail),
    ]
