"""dcgm-exporter endpoints scraped directly: the exposition text parsed and checked,
the fields gpuquota reads kept as readings, and the window figures computed from them
as Prometheus would (`fields.FIGURES`)."""

from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from gpuquota.telemetry import conf
from gpuquota.telemetry.errors import SourceError
from gpuquota.telemetry.fields import DEV_UTIL, FIGURES, METRICS, PROF_UTIL, reading_usable
from gpuquota.telemetry.labels import gpu_uuid, mig_instance
from gpuquota.telemetry.prometheus import WindowTable

WANTED = frozenset(METRICS)
UTIL_METRICS = frozenset({PROF_UTIL, DEV_UTIL})


def exposition_parse(text: str, *, where: str) -> list[list]:
    """[[metric, labels, value], ...] of the usable readings of the fields gpuquota reads;
    SourceError for text that is not the exposition format or breaks the limits (nothing
    is kept then)."""
    series: list[list] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                metric = sample.name
                if metric not in WANTED and metric.endswith("_total"):
                    # prometheus_client names a counter's samples <family>_total; dcgm-exporter
                    # declares its energy and ECC fields as counters without the suffix.
                    metric = metric.removesuffix("_total")
                if metric not in WANTED:
                    continue
                for label, text_value in sample.labels.items():
                    if len(text_value) > conf.MAX_LABEL_VALUE_CHARS or \
                            len(label) > conf.MAX_LABEL_VALUE_CHARS:
                        raise SourceError(f"{where}: a label value is over "
                                          f"{conf.MAX_LABEL_VALUE_CHARS} characters")
                value = float(sample.value)
                if reading_usable(metric, value):  # NaN, negatives, DCGM's blanks: none
                    series.append([metric, dict(sample.labels), value])
                if len(series) > conf.MAX_SERIES:
                    raise SourceError(f"{where}: over {conf.MAX_SERIES} series")
    except SourceError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        # never the parser's message: it quotes the offending line of the answer
        raise SourceError(f"{where}: not Prometheus exposition text") from exc
    return series


def _label_key(labels: dict) -> tuple:
    return tuple(sorted(labels.items()))


def _figure(fn: str, values: list[float]) -> float:
    if fn == "count_over_time":
        return float(len(values))
    if fn == "avg_over_time":
        return sum(values) / len(values)
    if fn == "max_over_time":
        return max(values)
    if fn == "last_over_time":
        return values[-1]
    return float(sum(1 for a, b in zip(values, values[1:], strict=False) if b < a))  # resets


def window_figures(readings: list[tuple[float, list]], *, start: int, stop: int,
                   window_s: int) -> WindowTable:
    """The figures of the windows starting in [start, stop) from (unix time, series)
    readings; unusable values (NaN, negative, DCGM's blanks) are dropped first."""
    points: dict[tuple[str, tuple], list[tuple[float, float]]] = defaultdict(list)
    labels_of: dict[tuple, dict] = {}
    for at, series in readings:
        if not start <= at < stop:
            continue
        for metric, labels, value in series:
            if reading_usable(metric, value):
                key = _label_key(labels)
                labels_of[key] = labels
                points[(metric, key)].append((at, value))
    table: WindowTable = {figure.name: [] for figure in FIGURES}
    for (metric, key), found in points.items():
        found.sort()
        by_window: dict[int, list[float]] = defaultdict(list)
        for at, value in found:
            by_window[start + int((at - start) // window_s) * window_s].append(value)
        for figure in FIGURES:
            if figure.metric == metric:
                table[figure.name].append((labels_of[key], {
                    ws: _figure(figure.fn, values) for ws, values in by_window.items()}))
    return table


def point_times(readings: list[tuple[float, list]], wanted: dict[int, set], *,
                window_s: int) -> dict:
    """`prometheus.point_times` from stored scrapes."""
    times: dict = {}
    for at, series in readings:
        ws = int(at) - int(at) % window_s
        keys = wanted.get(ws)
        if not keys:
            continue
        for metric, labels, value in series:
            if metric not in UTIL_METRICS or not reading_usable(metric, value):
                continue
            instance = mig_instance(labels)
            if instance and metric == DEV_UTIL:
                continue
            key = (gpu_uuid(labels), instance)
            if key in keys:
                first, last = times.get((*key, ws), (at, at))
                times[(*key, ws)] = (min(first, at), max(last, at))
    return times
