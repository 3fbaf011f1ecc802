"""Prometheus gauges of lending, computed from the database at each scrape (contributed to
`/metrics` by `gpuquota.lending.contributions`)."""

from datetime import timedelta

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from gpuquota.lending.selectors import QUANTILES, loans_list, time_to_return

#: The period the time-to-return quantiles on /metrics are taken over.
TTR_WINDOW = timedelta(days=7)


class LendingCollector:
    """GPUs lent now and returning; returns and their time-to-return quantiles (nearest
    rank) over the last 7 days."""

    def collect(self):
        yield GaugeMetricFamily("gpuquota_lent_gpus", "GPUs lent to preemptible work now",
                                value=loans_list(state="open").count())
        yield GaugeMetricFamily("gpuquota_returning_gpus",
                                "Returned GPUs whose borrowers have not yet left",
                                value=loans_list(state="returning").count())
        now = timezone.now()
        figures = time_to_return(start=now - TTR_WINDOW, end=now)
        yield GaugeMetricFamily("gpuquota_lending_returns_7d",
                                "Returns asked in the last 7 days and seen free",
                                value=figures.returns)
        ttr = GaugeMetricFamily("gpuquota_lending_time_to_return_seconds",
                                "Time from a return's ask to its GPU seen free, last 7 days "
                                "(nearest rank)", labels=["quantile"])
        for q in QUANTILES:
            value = getattr(figures, f"p{q}_s")
            if value is not None:
                ttr.add_metric([f"0.{q}"], value)
        yield ttr
