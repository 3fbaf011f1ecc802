"""Reading window figures from a Prometheus-compatible API (`GET /api/v1/query_range`:
Prometheus, Thanos, VictoriaMetrics, Mimir).

Prometheus computes each window's figure itself: `avg_over_time(M[60s])` evaluated a
millisecond before the window's end covers exactly the readings of the window
[start, end), the agent's windows. A window with no reading has no point: no data."""

import math
import re
from datetime import datetime
from operator import itemgetter

import orjson

from gpuquota.telemetry import conf
from gpuquota.telemetry.errors import SourceError
from gpuquota.telemetry.fields import (
    DEV_UTIL,
    FIGURES,
    FP64_BLANK,
    PLAUSIBLE_MAX,
    PROF_UTIL,
    Figure,
    figure_usable,
)
from gpuquota.telemetry.http import body_get, session_for
from gpuquota.telemetry.labels import gpu_uuid, mig_instance
from gpuquota.telemetry.models import TelemetrySource

EPSILON_S = 0.001
# Label matchers only: `name="value"`, `name=~"re"`, comma-separated; no braces, no newlines.
SELECTOR_RE = re.compile(
    r'^\s*([A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"([^"\\\n]|\\.)*"\s*,?\s*)*$')

ERROR_TYPE_RE = re.compile(r"^[a-z_]{1,32}$")

WindowTable = dict[str, list[tuple[dict, dict[int, float]]]]


def selector_valid(selector: str) -> bool:
    return bool(SELECTOR_RE.match(selector or ""))


# Figures Prometheus answers only where they are not what their window's average says
# (`_sparse_fill` puts the rest back): a window's count where it is not the scrapes a
# window holds (or the average is not usable), its max where it differs from its average.
# Most windows are steady: a third of the points fewer to send and parse, the same table.
COUNT_OF = {"prof_count": "prof_avg", "util_count": "util_avg"}
MAX_OF = {"prof_max": "prof_avg", "util_max": "util_avg", "fb_max": "fb_avg"}


def _usable(query: str) -> str:
    """The query's values that `figure_usable` takes (NaN fails every comparison)."""
    return f"({query} >= 0 < {PLAUSIBLE_MAX:.0f} != {FP64_BLANK:.0f})"


def figure_query(figure: Figure, *, selector: str, window_s: int, readings: int = 1) -> str:
    """The PromQL of a figure; `readings`: the scrapes a window holds (`COUNT_OF`)."""
    def over(fn: str) -> str:
        return f"{fn}({figure.metric}{{{selector.strip()}}}[{window_s}s])"

    query = over(figure.fn)
    if figure.name in COUNT_OF:
        return (f"{query} unless ({query} == {readings} and "
                f"{_usable(over('avg_over_time'))})")
    if figure.name in MAX_OF:
        return f"{query} unless ({query} == {over('avg_over_time')})"
    # resets are rare: Prometheus answers only the windows that have one
    return f"{query} > 0" if figure.fn == "resets" else query


def _key(labels: dict) -> tuple:
    return tuple(sorted(labels.items()))


def _in_order(points: dict) -> dict:
    """The points by window start (as Prometheus answers them)."""
    keys = list(points)
    return points if keys == sorted(keys) else dict(sorted(points.items()))


def _sparse_fill(table: WindowTable, *, readings: int) -> None:
    """Put back what the `COUNT_OF` and `MAX_OF` queries leave out, so the table is the one
    the plain queries give: a count is `readings` in the windows whose average is answered
    and usable and whose count is not; a max is the average in the windows whose max is
    not answered at all (the max queries are read with their unusable values, which are
    dropped here). Both have the series of their average, in its order."""
    for name, average in (*COUNT_OF.items(), *MAX_OF.items()):
        answered = {_key(labels): points for labels, points in table[name]}
        filled = []
        for labels, points in table[average]:
            found = answered.pop(_key(labels), None)
            if found is None:
                merged = dict.fromkeys(points, float(readings)) if name in COUNT_OF \
                    else dict(points)
            elif name in COUNT_OF:
                merged = _in_order({**dict.fromkeys(points, float(readings)), **found})
            else:
                merged = {ws: v for ws, v in points.items() if ws not in found}
                merged.update((ws, v) for ws, v in found.items() if figure_usable(v))
                merged = _in_order(merged)
            filled.append((labels, merged))
        filled += [(dict(key), _in_order({ws: v for ws, v in points.items() if figure_usable(v)}))
                   for key, points in answered.items()]
        table[name] = filled


def _labels_check(labels: dict, where: str) -> None:
    for name, value in labels.items():
        if len(value) > conf.MAX_LABEL_VALUE_CHARS or len(name) > conf.MAX_LABEL_VALUE_CHARS:
            raise SourceError(f"{where}: a label value is over {conf.MAX_LABEL_VALUE_CHARS} "
                              "characters; nothing imported")


def answer_parse(raw: bytes, *, window_s: int, where: str, usable_only: bool = True
                 ) -> list[tuple[dict, dict[int, float]]]:
    """The series of a query_range answer as (labels, {window_start: value}); with
    `usable_only`, values that are not figures are left out."""
    try:
        answer = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SourceError(f"{where}: the answer is not JSON") from exc
    if type(answer) is not dict or answer.get("status") != "success":
        # Only Prometheus's error type, a word of its fixed vocabulary: never the text of
        # an answer, which may come from a service that is not Prometheus at all.
        kind = answer.get("errorType") if type(answer) is dict else None
        kind = kind if isinstance(kind, str) and ERROR_TYPE_RE.match(kind) else "no error type"
        raise SourceError(f"{where}: the query failed ({kind})")
    data = answer.get("data")
    if type(data) is not dict or data.get("resultType") != "matrix" or \
            type(data.get("result")) is not list:
        raise SourceError(f"{where}: not a query_range matrix")
    if len(data["result"]) > conf.MAX_SERIES:
        raise SourceError(f"{where}: {len(data['result'])} series, over the limit of "
                          f"{conf.MAX_SERIES}; narrow the source's selector")
    series = []
    for entry in data["result"]:
        try:
            labels, values = entry["metric"], entry["values"]
            _labels_check(labels, where)
            # a point stands for the window ending at its time (+ EPSILON_S); values that
            # are not figures (NaN, infinities, negative, DCGM's blanks) are left out here
            points = _points(values, window_s) if usable_only else _all_points(values, window_s)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SourceError(f"{where}: a malformed series") from exc
        series.append((labels, points))
    return series


def _all_points(values: list, window_s: int) -> dict[int, float]:
    shift = 0.5 - window_s
    return {int(t + shift): float(v) for t, v in values}


def _points(values: list, window_s: int) -> dict[int, float]:
    """{window start: value} of a series' [time, "value"] pairs, usable figures only (the
    same test as `figure_usable`, inlined: millions of points a day)."""
    shift = 0.5 - window_s
    starts = [int(t + shift) for t in map(itemgetter(0), values)]
    figures = list(map(float, map(itemgetter(1), values)))
    # every value usable, tested in C: NaN makes the sum NaN (min and max may skip it)
    if not figures or (0 <= min(figures) and max(figures) < PLAUSIBLE_MAX
                       and FP64_BLANK not in figures and not math.isnan(sum(figures))):
        return dict(zip(starts, figures, strict=True))
    return {ws: v for ws, v in zip(starts, figures, strict=True) if figure_usable(v)}


def window_figures(source: TelemetrySource, *, start: datetime, end: datetime) -> WindowTable:
    """Every figure of the windows starting in [start, end) (both on window boundaries),
    in chunks of at most 11,000 points per series."""
    window_s = source.window_s
    first, stop = int(start.timestamp()), int(end.timestamp())
    step_windows = conf.MAX_POINTS_PER_SERIES
    readings = max(1, math.ceil(window_s / source.scrape_interval_s))
    session = session_for(source)
    url = source.base_url.rstrip("/") + "/api/v1/query_range"
    table: WindowTable = {figure.name: [] for figure in FIGURES}
    try:
        for chunk_start in range(first, stop, step_windows * window_s):
            last = min(stop, chunk_start + step_windows * window_s) - window_s
            params = {"start": f"{chunk_start + window_s - EPSILON_S:.3f}",
                      "end": f"{last + window_s - EPSILON_S:.3f}", "step": f"{window_s}s"}
            part: WindowTable = {}
            for figure in FIGURES:
                params["query"] = figure_query(figure, selector=source.selector,
                                               window_s=window_s, readings=readings)
                raw = body_get(session, url, params=params)
                part[figure.name] = answer_parse(
                    raw, window_s=window_s, where=f"{source.name} {figure.name}",
                    usable_only=figure.name not in MAX_OF)
            _sparse_fill(part, readings=readings)
            for name, series in part.items():
                table[name].extend(series)
    finally:
        session.close()
    return table


def point_times(source: TelemetrySource, wanted: dict[int, set]) -> dict:
    """The first and last reading times of the utilization series of the GPUs (or MIG
    instances) in `wanted` ({window start: {(uuid, instance)}}), read raw (a range
    selector at the window's end): {(uuid, instance, window start): (first, last)}."""
    window_s = source.window_s
    selector = source.selector.strip()
    query = (f'{{__name__=~"{PROF_UTIL}|{DEV_UTIL}"{"," if selector else ""}{selector}}}'
             f"[{window_s}s]")
    url = source.base_url.rstrip("/") + "/api/v1/query"
    times: dict = {}
    session = session_for(source)
    try:
        for ws, keys in sorted(wanted.items()):
            raw = body_get(session, url, params={
                "query": query, "time": f"{ws + window_s - EPSILON_S:.3f}"})
            for labels, points in _raw_series(raw, where=f"{source.name} reading times"):
                instance = mig_instance(labels)
                if instance and labels.get("__name__") == DEV_UTIL:
                    continue
                key = (gpu_uuid(labels), instance)
                stamps = [t for t, v in points if ws <= t < ws + window_s and figure_usable(v)]
                if key not in keys or not stamps:
                    continue
                first, last = times.get((*key, ws), (stamps[0], stamps[0]))
                times[(*key, ws)] = (min(first, *stamps), max(last, *stamps))
    finally:
        session.close()
    return times


def _raw_series(raw: bytes, *, where: str) -> list[tuple[dict, list[tuple[float, float]]]]:
    try:
        answer = orjson.loads(raw)
        if answer.get("status") != "success":
            raise SourceError(f"{where}: the query failed")
        result = answer["data"]["result"]
        if len(result) > conf.MAX_SERIES:
            raise SourceError(f"{where}: {len(result)} series, over the limit of "
                              f"{conf.MAX_SERIES}; narrow the source's selector")
        out = []
        for entry in result:
            _labels_check(entry["metric"], where)
            out.append((entry["metric"], [(float(t), float(v)) for t, v in entry["values"]]))
        return out
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SourceError(f"{where}: not a query answer gpuquota can read") from exc
