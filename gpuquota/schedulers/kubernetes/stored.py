"""What the API server keeps of what gpuquota writes (kubernetes.md#what-the-server-keeps).
The backend compares the server's form of each object with the plan, never the text it
sent, so a second reconcile changes nothing on any supported Kueue release:

- the API server and Kueue's webhooks fill in fields gpuquota does not set (defaults, a
  DeviceTaintRule's `timeAdded`): only the fields the plan names are compared;
- Kueue converts what it stores. From 0.16 it stores v1beta2, where flavorFungibility's
  deprecated `Borrow` and `Preempt` become `MayStopSearch`; reading back through v1beta1
  keeps `MayStopSearch` (Kueue's clusterqueue_conversion.go and its test "FlavorFungibility
  MayStopSearch preserved"). gpuquota writes `MayStopSearch` to the releases that know it
  (0.15 and later; `Borrow` before) and compares the old and new names as one value, which
  also holds where the release is unknown.
"""

from __future__ import annotations

#: Kueue 0.15 renamed `Borrow` and `Preempt` to `MayStopSearch`, keeping the old names as
#: deprecated aliases; 0.16 stores v1beta2, which has only the new name.
MAY_STOP_SEARCH_SINCE = (0, 15)
V1BETA2_STORED_SINCE = (0, 16)
_FUNGIBILITY = ("flavorFungibility",)
#: Per kind, the spec paths whose values the server may keep under another name, and the
#: names that are one value.
EQUIVALENT: dict[str, dict[tuple[str, ...], frozenset[str]]] = {
    "ClusterQueue": {
        (*_FUNGIBILITY, "whenCanBorrow"): frozenset({"Borrow", "MayStopSearch"}),
        (*_FUNGIBILITY, "whenCanPreempt"): frozenset({"Preempt", "MayStopSearch"}),
    },
}


def when_can_borrow(kueue_minor: tuple[int, int] | None) -> str:
    """The name of "stop at the first flavor where the workload can borrow" on a release
    (None: unknown, the old name, which every release accepts)."""
    return ("MayStopSearch" if kueue_minor is not None and kueue_minor >= MAY_STOP_SEARCH_SINCE
            else "Borrow")


def stored_version(kueue_minor: tuple[int, int] | None) -> str:
    """The version a Kueue release stores its objects in ("" when the release is unknown)."""
    if kueue_minor is None:
        return ""
    return "v1beta2" if kueue_minor >= V1BETA2_STORED_SINCE else "v1beta1"


def _project(observed, planned):
    """`observed` reduced to what `planned` names (the server's defaults are not drift)."""
    if isinstance(planned, dict) and isinstance(observed, dict):
        return {k: _project(observed[k], v) for k, v in planned.items() if k in observed}
    if isinstance(planned, list) and isinstance(observed, list) and len(planned) == len(observed):
        return [_project(o, p) for o, p in zip(observed, planned, strict=True)]
    return observed


def _at(spec, path: tuple[str, ...]):
    for key in path:
        if not isinstance(spec, dict) or key not in spec:
            return None
        spec = spec[key]
    return spec


def server_form(kind: str, observed: dict, planned: dict | None) -> dict:
    """The observed spec as it compares with the planned one: the fields the plan names, and
    where the server keeps a planned value under another name, the planned value."""
    if planned is None:
        return observed
    form = _project(observed, planned)
    for path, names in EQUIVALENT.get(kind, {}).items():
        seen, wanted = _at(form, path), _at(planned, path)
        if seen != wanted and seen in names and wanted in names:
            _at(form, path[:-1])[path[-1]] = wanted
    return form
