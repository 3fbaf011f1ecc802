"""Limit/offset pagination that refuses what it cannot honour.

DRF's default silently ignores a malformed `offset` (`offset=null`) and passes any
`limit` to the database (`limit=99999999999999999999` overflows a bigint): here both
are integers in a documented range, or a 400 naming the parameter.
"""

from rest_framework import exceptions
from rest_framework.pagination import LimitOffsetPagination

MAX_LIMIT = 1000
MAX_OFFSET = 2**31 - 1


def bounded_int(raw: str, *, name: str, minimum: int, maximum: int) -> int:
    """An integer query parameter within [minimum, maximum], else a 400 naming it."""
    text = raw.strip()
    if not text.isascii() or not text.lstrip("+-").isdigit() or len(text) > 20:
        raise exceptions.ValidationError({name: [f"An integer from {minimum} to {maximum}."]})
    value = int(text)
    if not minimum <= value <= maximum:
        raise exceptions.ValidationError({name: [f"An integer from {minimum} to {maximum}."]})
    return value


class StrictLimitOffsetPagination(LimitOffsetPagination):
    """`limit` 1..1000 (default PAGE_SIZE), `offset` 0..2**31-1; anything else is a 400."""

    max_limit = MAX_LIMIT

    def get_limit(self, request):
        raw = request.query_params.get(self.limit_query_param)
        if raw is None:
            return self.default_limit
        return bounded_int(raw, name=self.limit_query_param, minimum=1, maximum=self.max_limit)

    def get_offset(self, request):
        raw = request.query_params.get(self.offset_query_param)
        if raw is None:
            return 0
        return bounded_int(raw, name=self.offset_query_param, minimum=0, maximum=MAX_OFFSET)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: (1, self.max_limit),
                  self.offset_query_param: (0, MAX_OFFSET)}
        for parameter in parameters:
            low, high = bounds[parameter["name"]]
            parameter["schema"] = {**parameter["schema"], "minimum": low, "maximum": high}
        return parameters
