"""drf-spectacular postprocessing: the error responses every API operation can give,
added wherever a view did not declare them, so the published schema describes what
the endpoints really answer (new endpoints included, without extra code).

- 400 when it takes parameters or a body (the one error format names the field),
- 401 without valid credentials, 429 when throttled (with Retry-After),
- 404 when it has a path parameter (no such object, or not visible),
- 413 when it takes a body (over DATA_UPLOAD_MAX_MEMORY_SIZE),
- 503 with Retry-After while the database is unreachable (every operation).
"""

ERROR_REF = "#/components/schemas/Error"
DESCRIPTIONS = {
    "400": "Bad input: the one error format names each field at fault.",
    "401": "No valid credentials (session or `Authorization: Bearer` token).",
    "404": "No such object, or not visible to the caller.",
    "413": "The request body is too large.",
    "429": "Too many requests: retry after `Retry-After` seconds.",
    "503": "The database is unavailable (code `unavailable`): retry after `Retry-After` "
           "seconds.",
}
ERROR_SCHEMA = {
    "type": "object",
    "description": "The one API error format.",
    "required": ["code", "detail", "errors"],
    "properties": {
        "code": {"type": "string"},
        "detail": {"type": "string"},
        "errors": {"type": "array", "items": {
            "type": "object", "required": ["field", "message"],
            "properties": {"field": {"type": "string", "nullable": True},
                           "message": {"type": "string"}}}},
    },
}
METHODS = ("get", "put", "post", "patch", "delete")


def _error(status: str) -> dict:
    response = {"description": DESCRIPTIONS[status],
                "content": {"application/json": {"schema": {"$ref": ERROR_REF}}}}
    if status in ("429", "503"):
        response["headers"] = {"Retry-After": {"schema": {"type": "integer"},
                                               "description": "Seconds to wait."}}
    return response


def _statuses(operation: dict) -> list[str]:
    parameters = operation.get("parameters", [])
    statuses = ["401", "429", "503"]
    if parameters or "requestBody" in operation:
        statuses.append("400")
    if any(p.get("in") == "path" for p in parameters):
        statuses.append("404")
    if "requestBody" in operation:
        statuses.append("413")
    return statuses


def error_responses(result: dict, generator=None, request=None, public=None, **kwargs) -> dict:
    """The schema with the generic error responses added to every operation."""
    result.setdefault("components", {}).setdefault("schemas", {}).setdefault(
        "Error", ERROR_SCHEMA)
    for path_item in result.get("paths", {}).values():
        for method in METHODS:
            operation = path_item.get(method)
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            for status in _statuses(operation):
                responses.setdefault(status, _error(status))
    return result


# Operations are tagged by the area of the product they belong to (the first path segment
# after /api/v1/), so Swagger UI and ReDoc group them; an area not listed here is tagged
# with its segment, capitalised (a new app's endpoints group themselves).
AREAS = {
    "teams": "Reservations", "gpu-classes": "Reservations", "availability": "Reservations",
    "reservations": "Reservations", "usage": "Usage", "statements": "Statements",
    "reclaim": "Reclaim", "agent": "Agent", "me": "Account", "audit": "Audit",
    "lending": "Lending", "telemetry": "Telemetry", "sso": "Single sign-on",
    "focus": "Statements", "jobs": "Jobs", "reliability": "Reliability",
}
AREA_DESCRIPTIONS = {
    "Reservations": "Teams, GPU classes, availability and reservations: request, extend, "
                    "shrink, swap, release, cancel; admins approve and deny.",
    "Usage": "Utilization versus allocation for exact periods, by script.",
    "Statements": "Monthly chargeback statements of a team or the organisation: JSON, CSV "
                  "and PDF; a month as a FOCUS cost and usage dataset.",
    "Reclaim": "Idle and oversized reservations: recommendations, objections, exemptions, "
               "the policy backtest.",
    "Lending": "Idle reserved GPUs lent to preemptible work: loans, returns, the pool, "
               "the policy and teams' opt-outs.",
    "Jobs": "A report per job (Slurm job, pod, process): its GPUs' use, cost and the "
            "pitfalls named with what they wasted.",
    "Reliability": "GPU failure figures, drift and lemons, at any instant (admins).",
    "Telemetry": "Telemetry sources (dcgm-exporter endpoints, Prometheus) and their pulls.",
    "Single sign-on": "The mapping rules from an identity provider's groups to teams and "
                      "roles, and their preview.",
    "Agent": "The node agent's telemetry batches (node tokens).",
    "Account": "The caller.",
    "Audit": "Who changed what, when.",
}


def _area(path: str) -> str:
    segment = path.removeprefix("/api/").removeprefix("v1/").strip("/").split("/")[0]
    return AREAS.get(segment, segment.replace("-", " ").capitalize() or "API")


def tags_by_area(result: dict, generator=None, request=None, public=None, **kwargs) -> dict:
    """Every operation tagged with its area; the tags listed in the areas' order, each
    with what it holds."""
    used: list[str] = []
    for path, path_item in result.get("paths", {}).items():
        area = _area(path)
        for method in METHODS:
            if method in path_item:
                path_item[method]["tags"] = [area]
                if area not in used:
                    used.append(area)
    order = list(AREA_DESCRIPTIONS)
    used.sort(key=lambda tag: (order.index(tag) if tag in order else len(order), tag))
    result["tags"] = [{"name": tag, **({"description": AREA_DESCRIPTIONS[tag]}
                                       if tag in AREA_DESCRIPTIONS else {})} for tag in used]
    return result
