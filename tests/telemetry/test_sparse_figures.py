"""Counts and maxima asked only where they say something (`prometheus.COUNT_OF`, `MAX_OF`):
the window table is the one the plain `*_over_time` queries give, window for window and
series for series, with readings that vary inside a window, a short window, DCGM's blank,
NaN and a second pod on the GPU; and Prometheus sends fewer points for them."""

from datetime import UTC, datetime

import pytest

from gpuquota.telemetry import prometheus
from gpuquota.telemetry.fields import FB_USED, FIGURES, PROF_UTIL
from gpuquota.telemetry.http import body_get, session_for
from gpuquota.telemetry.models import TelemetrySource
from tests.telemetry.conftest import hours_ago

pytestmark = [pytest.mark.prometheus, pytest.mark.django_db]

UUID = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
LABELS = f'UUID="{UUID}",gpu="0",Hostname="node-1"'
POD = ',namespace="nlp",pod="llm-0",container="main"'
BLANK = "140737488355328"


def _history(start: int) -> str:
    """Ten windows of readings every 10 s: steady ones, and the odd ones a window may hold."""
    util, memory = [], []
    for window in range(10):
        for step in range(6):
            at = start + window * 60 + step * 10
            if window == 3 and step >= 3:
                continue  # a short window: 3 readings
            value = f"{window / 10:g}"
            if window == 4:
                value = f"{(window + step) / 20:g}"  # varies within the window
            elif window == 5 and step == 2:
                value = BLANK  # the average is usable, the max is not
            elif window == 6:
                value = "NaN"
            util.append(f"{PROF_UTIL}{{{LABELS}}} {value} {at}")
            if window >= 7:  # a second pod on the GPU
                util.append(f"{PROF_UTIL}{{{LABELS}{POD}}} {value} {at}")
            memory.append(f"{FB_USED}{{{LABELS}}} {1000 + (step if window == 8 else 0)} {at}")
    return "\n".join([f"# TYPE {PROF_UTIL} gauge", *util, f"# TYPE {FB_USED} gauge", *memory,
                      "# EOF"]) + "\n"


def _plain(source: TelemetrySource, *, start: int, stop: int) -> dict:
    """The table of the plain queries (each figure's own function, nothing left out)."""
    session = session_for(source)
    params = {"start": f"{start + 60 - prometheus.EPSILON_S:.3f}",
              "end": f"{stop - prometheus.EPSILON_S:.3f}", "step": "60s"}
    table = {}
    for figure in FIGURES:
        query = f"{figure.fn}({figure.metric}{{}}[60s])"
        params["query"] = f"{query} > 0" if figure.fn == "resets" else query
        raw = body_get(session, source.base_url + "/api/v1/query_range", params=params)
        table[figure.name] = prometheus.answer_parse(raw, window_s=60, where="plain")
    session.close()
    return table


def test_counts_and_maxima_left_out_are_put_back_exactly(prometheus_with, cluster):
    start = hours_ago(3)
    server = prometheus_with(history=_history(start))
    source = TelemetrySource(name="p", cluster=cluster, kind="prometheus", base_url=server.url,
                             window_s=60, scrape_interval_s=10)
    table = prometheus.window_figures(source, start=datetime.fromtimestamp(start, UTC),
                                      end=datetime.fromtimestamp(start + 600, UTC))
    plain = _plain(source, start=start, stop=start + 600)
    assert table == plain
    counts = next(points for labels, points in plain["prof_count"] if "pod" not in labels)
    assert counts[start + 180] == 3 and counts[start] == 6
    maxima = next(points for labels, points in plain["prof_max"] if "pod" not in labels)
    assert start + 300 not in maxima and start + 360 not in maxima  # blank, NaN
    assert maxima[start + 240] == 0.45 and len(plain["prof_max"]) == 2


def test_steady_windows_are_not_sent(prometheus_with, cluster):
    start = hours_ago(3)
    server = prometheus_with(history=_history(start))
    session = session_for(TelemetrySource(base_url=server.url))
    params = {"start": f"{start + 60 - prometheus.EPSILON_S:.3f}",
              "end": f"{start + 600 - prometheus.EPSILON_S:.3f}", "step": "60s"}
    sent = {}
    for figure in FIGURES:
        if figure.name in ("prof_count", "prof_max", "fb_max"):
            params["query"] = prometheus.figure_query(figure, selector="", window_s=60,
                                                      readings=6)
            raw = body_get(session, server.url + "/api/v1/query_range", params=params)
            sent[figure.name] = sorted(
                ws - start for _, points in prometheus.answer_parse(
                    raw, window_s=60, where="t", usable_only=False) for ws in points)
    session.close()
    # counts: the short window and the NaN one (the blank's average is usable); maxima: the
    # window whose readings vary, the blank's and the NaN one; memory varies in one window
    assert sent == {"prof_count": [180, 360], "prof_max": [240, 300, 360], "fb_max": [480]}
