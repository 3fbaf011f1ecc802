"""The Grafana dashboard shipped in deploy/grafana/: valid JSON, and every metric its panels
query is one gpuquota's /metrics has (a rename breaks this test, not a site's dashboard)."""

import json
import re
from pathlib import Path

import pytest

from gpuquota.usage.metrics import metrics_render

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpuquota.json"

pytestmark = pytest.mark.django_db


def test_the_dashboards_queries_name_metrics_that_exist():
    dashboard = json.loads(DASHBOARD.read_text())
    exposed = set(re.findall(r"^# TYPE (\S+) ", metrics_render().decode(), re.MULTILINE))
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"\bgpuquota_[a-z0-9_]+", target["expr"])}
    assert {"gpuquota_telemetry_import_lag_seconds", "gpuquota_outbox_lag_seconds",
            "gpuquota_reclaimable_gpu_hours"} <= queried
    assert sorted(queried - exposed) == []
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
