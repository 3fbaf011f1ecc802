"""API input and output shapes. Input serializers only parse; services decide."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.models import Team
from gpuquota.core.api_fields import AwareDateTimeField, ChoiceField
from gpuquota.inventory.models import Gpu, GpuClass, gpu_uuid_normalize
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.services import MAX_GPUS_PER_REQUEST


class TeamSerializer(serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["slug", "name", "cost_center", "cost_center_owner_email"]


class TeamChangeSerializer(serializers.Serializer):
    cost_center = serializers.CharField(allow_blank=True, trim_whitespace=False, required=False,
                                        help_text="Printable text, at most 64 characters "
                                        "(empty: none).")
    cost_center_owner_email = serializers.EmailField(
        allow_blank=True, required=False,
        help_text="Copied on the team's statement mail (empty: none).")


class GpuClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuClass
        fields = ["name", "description"]


class AssignmentSerializer(serializers.Serializer):
    gpu = serializers.CharField(source="gpu.uuid")
    node = serializers.CharField(source="gpu.node.hostname")
    index = serializers.IntegerField(source="gpu.index", allow_null=True)
    assigned_from = serializers.DateTimeField()
    assigned_until = serializers.DateTimeField()
    end_reason = serializers.CharField()


class ReservationSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug")
    gpu_class = serializers.CharField(source="gpu_class.name")
    requested_by = serializers.CharField(source="requested_by.username")
    decided_by = serializers.CharField(source="decided_by.username", allow_null=True)
    assignments = serializers.SerializerMethodField()
    effective_end = serializers.SerializerMethodField(
        help_text="The latest end of its assignments: earlier than `end` after a release, "
        "shrink or cancel; null while it holds no GPUs (pending, denied).")

    class Meta:
        model = Reservation
        fields = [
            "id", "team", "gpu_class", "count", "start", "end", "effective_end", "placement",
            "status", "over_quota", "is_backfill", "purpose", "requested_by", "requested_at",
            "decided_by", "approved_at", "decision_reason", "assignments",
        ]

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_effective_end(self, obj):
        if hasattr(obj, "effective_end"):
            end = obj.effective_end
        else:
            end = max((a.assigned_until for a in obj.assignments.all()), default=None)
        return serializers.DateTimeField().to_representation(end) if end else None

    @extend_schema_field(AssignmentSerializer(many=True))
    def get_assignments(self, obj):
        rows = getattr(obj, "live_assignments", None)
        if rows is None:
            rows = obj.assignments.select_related("gpu", "gpu__node")
        return AssignmentSerializer(rows, many=True).data


class ReservationCreateSerializer(serializers.Serializer):
    # A slug, resolved by the view through the permission module: an unknown team and
    # one the caller may not see get the same 404, so no team's existence leaks.
    team = serializers.SlugField(help_text="Slug of a team you lead (admins: any team).")
    gpu_class = serializers.SlugRelatedField(slug_field="name", queryset=GpuClass.objects.all())
    count = serializers.IntegerField(
        min_value=1, max_value=MAX_GPUS_PER_REQUEST,
        error_messages={"min_value": "Ask for at least 1 GPU.",
                        "max_value": f"At most {MAX_GPUS_PER_REQUEST} GPUs per request."})
    start = AwareDateTimeField()
    end = AwareDateTimeField()
    placement = ChoiceField(choices=Reservation.Placement.choices,
                            default=Reservation.Placement.ANY)
    purpose = serializers.CharField(max_length=256, required=False, allow_blank=True, default="")


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class DenySerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class ExtendSerializer(ReasonSerializer):
    end = AwareDateTimeField()


class ShrinkSerializer(ReasonSerializer):
    count = serializers.IntegerField(help_text="How many GPUs to keep.")


class GpuUuidField(serializers.CharField):
    """A physical GPU by its NVML UUID (compared case-insensitively)."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        try:
            return Gpu.objects.get(uuid=gpu_uuid_normalize(value))
        except (ValueError, Gpu.DoesNotExist) as exc:
            raise serializers.ValidationError("No GPU with this UUID.") from exc


class SwapSerializer(ReasonSerializer):
    gpu = GpuUuidField(help_text="UUID of the held GPU to give back.")
    replacement = GpuUuidField(required=False, allow_null=True, default=None,
                               help_text="UUID of the GPU to take instead (default: any free).")


class AvailabilityQuerySerializer(serializers.Serializer):
    gpu_class = serializers.SlugRelatedField(slug_field="name", queryset=GpuClass.objects.all(),
                                             required=False)
    start = AwareDateTimeField(required=False)
    end = AwareDateTimeField(required=False)

    def validate(self, attrs):
        if attrs.get("start") and attrs.get("end") and attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "The end must be after the start."})
        return attrs


class ReservationFilterSerializer(serializers.Serializer):
    team = serializers.SlugField(required=False, allow_blank=True, max_length=64,
                                 help_text="Team slug (404 if not visible); empty: all.")
    status = ChoiceField(choices=Reservation.Status.choices, required=False, allow_blank=True,
                         help_text="Empty: all.")


class AuditFilterSerializer(serializers.Serializer):
    team = serializers.SlugField(required=False, allow_blank=True, max_length=64,
                                 help_text="Team slug (404 if not visible); empty: all.")


class AvailabilitySerializer(serializers.Serializer):
    gpu_class = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    total_gpus = serializers.IntegerField()
    free_gpus = serializers.IntegerField(help_text="GPUs free over the whole window.")


class AuditEntrySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    actor = serializers.CharField(source="actor.username", allow_null=True)
    action = serializers.CharField()
    object_type = serializers.CharField()
    object_id = serializers.CharField()
    team = serializers.CharField(source="team.slug", allow_null=True)
    changes = serializers.JSONField()
    reason = serializers.CharField()
