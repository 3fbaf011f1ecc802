"""What chargeback puts on the admin's home page (`gpuquota.core.attention`): drafts whose
month can be approved now, and approved statements whose mail has not gone out."""

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.urls import reverse

from gpuquota.core.attention import Attention
from gpuquota.core.timeutil import Period
from reports.models import Statement
from reports.services_statements import approval_opens

# An approved statement is normally sent within a minute; past this it is worth a look.
UNSENT_AFTER = timedelta(minutes=15)


def statements_attention(now: datetime) -> list[Attention]:
    """Drafts open for approval (the earliest such month linked, with its total per
    currency and the failed ones), and approved statements still unsent."""
    drafts = list(Statement.objects.filter(status=Statement.Status.DRAFT)
                  .values("month", "total", "currency", "error"))
    open_months = sorted({d["month"] for d in drafts
                          if approval_opens(Period.month(d["month"].year, d["month"].month))
                          <= now})
    ready = [d for d in drafts if d["month"] in open_months]
    review = reverse("statement_review")
    detail = ""
    if open_months:
        first = open_months[0]
        review += f"?month={first:%Y-%m}"
        totals: dict[str, Decimal] = defaultdict(Decimal)
        for d in ready:
            if not d["error"]:
                totals[d["currency"]] += d["total"]
        detail = f"{first:%B %Y}" + "".join(
            f" · {total:,.2f} {currency}" for currency, total in sorted(totals.items()))
        if failed := sum(1 for d in ready if d["error"]):
            detail += f" · {failed} failed"
    unsent = Statement.objects.filter(status=Statement.Status.APPROVED,
                                      approved_at__lte=now - UNSENT_AFTER).count()
    return [
        Attention(key="drafts", label="Statements to approve", count=len(ready), url=review,
                  detail=detail, order=20),
        Attention(key="unsent", label="Approved statements not yet mailed", count=unsent,
                  url=reverse("statement_review"), order=25,
                  detail="their leads have not all been served: check the mail settings"
                  if unsent else ""),
    ]
