"""Request body parsing for the API: JSON and forms that cannot crash a view.

A body nested deeper than `MAX_JSON_DEPTH` or holding a NUL character (which
PostgreSQL text cannot store) is refused with a 400 naming the place, before any
view or query sees it.
"""

from collections.abc import Iterator
from typing import Any

from rest_framework import exceptions, parsers

MAX_JSON_DEPTH = 64
NUL = "\x00"
NUL_MESSAGE = "NUL characters (\\u0000) are not allowed."


def _children(value: Any, path: str) -> Iterator[tuple[Any, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, path
            yield item, f"{path}.{key}" if path else str(key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield item, f"{path}[{index}]"


def document_check(data: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Refuse a parsed document nested deeper than `max_depth` or holding a NUL
    character anywhere (keys included); iterative, so any depth is safe."""
    stack = [(data, "", 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            if NUL in value:
                raise exceptions.ValidationError({path or "body": [NUL_MESSAGE]})
            continue
        if isinstance(value, dict | list):
            if depth >= max_depth:
                raise exceptions.ParseError(f"JSON nested deeper than {max_depth} levels.")
            stack.extend((child, child_path, depth + 1)
                         for child, child_path in _children(value, path))


class SafeJSONParser(parsers.JSONParser):
    """JSON with bounded nesting and no NUL characters."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise exceptions.ParseError(
                f"JSON nested deeper than {MAX_JSON_DEPTH} levels.") from exc
        document_check(data)
        return data


def form_check(data) -> None:
    """Refuse a parsed form (a QueryDict) with a NUL character in a name or a value."""
    for key, values in data.lists():
        if NUL in key or any(NUL in value for value in values):
            raise exceptions.ValidationError({key.replace(NUL, "") or "body": [NUL_MESSAGE]})


class SafeFormParser(parsers.FormParser):
    """URL-encoded forms without NUL characters."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        form_check(data)
        return data


class SafeMultiPartParser(parsers.MultiPartParser):
    """Multipart forms without NUL characters in their fields."""

    def parse(self, stream, media_type=None, parser_context=None):
        result = super().parse(stream, media_type, parser_context)
        form_check(result.data)
        return result
