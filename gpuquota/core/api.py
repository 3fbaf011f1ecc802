"""One error format for the whole API:

    {"code": "invalid", "detail": "first message", "errors": [{"field": "count", "message": "..."}]}

Domain errors from services, DRF validation errors, Django validation errors and
database constraint violations all come out in it, with a 4xx status; bad input
never becomes a 500. An unreachable database is a 503 with Retry-After, in it too.
"""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from gpuquota.core.conf import RETRY_AFTER_S
from gpuquota.core.errors import DomainError
from gpuquota.core.unavailable import database_unavailable, unavailable_api_body


def error_body(code: str, errors: list[dict]) -> dict:
    return {"code": code, "detail": errors[0]["message"] if errors else code, "errors": errors}


def _flatten(detail, prefix: str | None = None) -> list[dict]:
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            field = None if key in ("non_field_errors", "__all__") else key
            out.extend(
                _flatten(value, f"{prefix}.{field}" if prefix and field else field or prefix)
            )
        return out
    if isinstance(detail, list):
        out = []
        for index, value in enumerate(detail):
            nested = isinstance(value, dict | list)
            out.extend(_flatten(value, f"{prefix}[{index}]" if nested and prefix else prefix))
        return out
    return [{"field": prefix, "message": str(detail)}]


def exception_handler(exc, context):
    if database_unavailable(exc):
        return Response(unavailable_api_body(), status=status.HTTP_503_SERVICE_UNAVAILABLE,
                        headers={"Retry-After": str(RETRY_AFTER_S)})
    if isinstance(exc, DomainError):
        errors = [{"field": exc.field, "message": exc.message}]
        return Response(error_body(exc.code, errors), status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        return Response(error_body("invalid", _flatten(detail)), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, IntegrityError):
        errors = [{"field": None, "message": "conflicts with existing data (a concurrent change)"}]
        return Response(error_body("conflict", errors), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body("invalid", _flatten(exc.detail))
    elif isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else "error"
        response.data = error_body(code, [{"field": None, "message": str(exc.detail)}])
    return response


class ErrorItemSerializer(serializers.Serializer):
    field = serializers.CharField(allow_null=True)
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer):
    """The one API error format."""

    code = serializers.CharField()
    detail = serializers.CharField()
    errors = ErrorItemSerializer(many=True)


# The responses most endpoints document (their descriptions, one per status).
ERRORS = {
    400: OpenApiResponse(ErrorSerializer, description="Bad input: names the field."),
    403: OpenApiResponse(ErrorSerializer, description="Not allowed (a member)."),
    404: OpenApiResponse(ErrorSerializer, description="No such object (or not visible)."),
    409: OpenApiResponse(ErrorSerializer, description="No capacity, over quota, wrong state."),
}
