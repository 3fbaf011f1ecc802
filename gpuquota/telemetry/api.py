"""The telemetry sources API under /api/v1/telemetry/sources (admins only). The secret
is write-only: answers show its first characters at most."""

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import IsPlatformAdmin
from gpuquota.inventory.models import Cluster
from gpuquota.reservations.serializers import ErrorSerializer
from gpuquota.telemetry.forms import FIELDS
from gpuquota.telemetry.models import TelemetrySource
from gpuquota.telemetry.selectors import source_limits
from gpuquota.telemetry.services import source_delete, source_save

ERRORS = {400: OpenApiResponse(ErrorSerializer, description="A field is missing or wrong; "
                               "the body names it."),
          404: OpenApiResponse(ErrorSerializer, description="No such source.")}
FORBIDDEN = {403: OpenApiResponse(ErrorSerializer, description="Admins only.")}


class SourceSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="slug", queryset=Cluster.objects.all())
    secret = serializers.CharField(write_only=True, required=False, allow_blank=True,
                                   trim_whitespace=False,
                                   help_text='Password or bearer token; "" removes it.')
    lag_s = serializers.SerializerMethodField()
    limits = serializers.SerializerMethodField(
        help_text="What this source's variant of dcgm-exporter cannot carry, from what its "
                  "series showed.")

    class Meta:
        model = TelemetrySource
        fields = ["id", *FIELDS, "secret", "secret_prefix", "cursor", "lag_s", "limits",
                  "last_pull_at", "last_success_at", "last_error", "last_error_at",
                  "failures"]
        read_only_fields = ["secret_prefix", "cursor", "last_pull_at", "last_success_at",
                            "last_error", "last_error_at", "failures"]

    def get_limits(self, source) -> list[str]:
        return source_limits(observed=source.observed)

    def get_lag_s(self, source) -> int | None:
        return int((timezone.now() - source.cursor).total_seconds()) if source.cursor else None


def _save(request, serializer: SourceSerializer) -> TelemetrySource:
    serializer.is_valid(raise_exception=True)
    data = dict(serializer.validated_data)
    secret = data.pop("secret", None)
    source = serializer.instance or TelemetrySource()
    for name, value in data.items():
        setattr(source, name, value)
    return source_save(source=source, secret=secret, actor=request.user)


class SourceListView(APIView):
    """Every source; admins add one."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(responses={200: SourceSerializer(many=True), **FORBIDDEN})
    def get(self, request):
        return Response(SourceSerializer(TelemetrySource.objects.select_related("cluster"),
                                         many=True).data)

    @extend_schema(request=SourceSerializer,
                   responses={201: SourceSerializer, **ERRORS, **FORBIDDEN})
    def post(self, request):
        source = _save(request, SourceSerializer(data=request.data))
        return Response(SourceSerializer(source).data, status=status.HTTP_201_CREATED)


class SourceDetailView(APIView):
    """One source: read, change (PATCH), delete."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(responses={200: SourceSerializer, 404: ERRORS[404], **FORBIDDEN})
    def get(self, request, pk: int):
        return Response(SourceSerializer(get_object_or_404(TelemetrySource, pk=pk)).data)

    @extend_schema(request=SourceSerializer,
                   responses={200: SourceSerializer, **ERRORS, **FORBIDDEN})
    def patch(self, request, pk: int):
        source = get_object_or_404(TelemetrySource, pk=pk)
        source = _save(request, SourceSerializer(source, data=request.data, partial=True))
        return Response(SourceSerializer(source).data)

    @extend_schema(responses={204: None, 404: ERRORS[404], **FORBIDDEN})
    def delete(self, request, pk: int):
        source_delete(source=get_object_or_404(TelemetrySource, pk=pk), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
