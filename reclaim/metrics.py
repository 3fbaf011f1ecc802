"""Prometheus gauges of reclaim, computed from the database at each scrape (contributed
to `/metrics` by `reclaim.contributions`)."""

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily

from reclaim.models import Recommendation
from reclaim.selectors import reclaim_figures


class ReclaimCollector:
    """Reclaimable GPUs, GPU-hours and savings now; reclaimed GPU-hours and money saved
    this month; recommendations per kind and live status."""

    def collect(self):
        figures = reclaim_figures()
        yield GaugeMetricFamily("gpuquota_reclaimable_gpus",
                                "GPUs named by open, non-exempt recommendations",
                                value=figures.reclaimable_gpus)
        yield GaugeMetricFamily("gpuquota_reclaimable_gpu_hours",
                                "Their remaining assigned GPU-hours",
                                value=float(figures.reclaimable_gpu_hours))
        yield GaugeMetricFamily("gpuquota_reclaimed_gpu_hours_month",
                                "GPU-hours given back by releases this month (UTC)",
                                value=float(figures.reclaimed_gpu_hours))
        for name, help_text, amount in (
            ("gpuquota_reclaimable_savings", "Reserved charges of the reclaimable GPU-hours",
             figures.reclaimable_savings),
            ("gpuquota_reclaim_saved_month", "Reserved charges saved by this month's releases",
             figures.saved),
        ):
            gauge = GaugeMetricFamily(name, help_text, labels=["currency"])
            gauge.add_metric([figures.currency], float(amount))
            yield gauge
        live = GaugeMetricFamily("gpuquota_reclaim_recommendations",
                                 "Live recommendations per kind and status",
                                 labels=["kind", "status"])
        counts = {(row["kind"], row["status"]): row["n"] for row in
                  Recommendation.objects.filter(status__in=Recommendation.LIVE)
                  .values("kind", "status").annotate(n=Count("id")).order_by()}
        for kind in Recommendation.Kind.values:
            for status in Recommendation.LIVE:
                live.add_metric([kind, status], counts.get((kind, status), 0))
        yield live
