"""The lending API's shapes: loans, the pool, opt-outs, returns and the policy."""

from rest_framework import serializers

from gpuquota.core.api_fields import AwareDateTimeField, ChoiceField
from gpuquota.lending.models import LendingOptOut
from gpuquota.lending.selectors import LOAN_STATES
from gpuquota.reservations.models import Loan


class LoanSerializer(serializers.ModelSerializer):
    reservation = serializers.IntegerField(source="assignment.reservation_id")
    team = serializers.CharField(source="assignment.reservation.team.slug")
    gpu_class = serializers.CharField(source="assignment.reservation.gpu_class.name")
    gpu = serializers.CharField(source="gpu.uuid")
    cluster = serializers.CharField(source="gpu.node.cluster.slug")
    node = serializers.CharField(source="gpu.node.hostname")
    gpu_index = serializers.IntegerField(source="gpu.index", allow_null=True)
    lent_by = serializers.CharField(source="lent_by.username", allow_null=True, default=None)
    returned_by = serializers.CharField(source="returned_by.username", allow_null=True,
                                        default=None)
    time_to_return_s = serializers.SerializerMethodField()

    class Meta:
        model = Loan
        fields = ["id", "reservation", "team", "gpu_class", "gpu", "cluster", "node",
                  "gpu_index", "lent_from", "returned_at", "freed_at", "end_reason",
                  "time_to_return_s", "lent_by", "lend_reason", "returned_by"]

    def get_time_to_return_s(self, loan: Loan) -> int | None:
        if loan.freed_at is None or loan.returned_at is None:
            return None
        return int((loan.freed_at - loan.returned_at).total_seconds())


class LoanQuerySerializer(serializers.Serializer):
    state = ChoiceField(choices=LOAN_STATES, required=False)
    team = serializers.SlugField(required=False, help_text="team slug (404 if not visible)")


class PoolGpuSerializer(serializers.Serializer):
    """A GPU lent now: where preemptible work may run until `returned_at` is set."""

    loan = serializers.IntegerField(source="id")
    gpu = serializers.CharField(source="gpu.uuid")
    gpu_class = serializers.CharField(source="assignment.reservation.gpu_class.name")
    cluster = serializers.CharField(source="gpu.node.cluster.slug")
    node = serializers.CharField(source="gpu.node.hostname")
    gpu_index = serializers.IntegerField(source="gpu.index", allow_null=True)
    lent_from = serializers.DateTimeField()
    advisory = serializers.SerializerMethodField(
        help_text="True where the cluster has no scheduler backend: place work yourself.")

    def get_advisory(self, loan: Loan) -> bool:
        return loan.gpu.node.cluster.scheduler == "none"


class LendNowSerializer(serializers.Serializer):
    reservation = serializers.IntegerField(min_value=1)
    gpu = serializers.CharField(required=False, max_length=64,
                                help_text="NVML UUID; default the reservation's first free GPU")
    reason = serializers.CharField(required=False, max_length=256, allow_blank=True)


class ReturnSerializer(serializers.Serializer):
    note = serializers.CharField(required=False, max_length=256, allow_blank=True)


class OptOutSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug")
    gpu_class = serializers.CharField(source="gpu_class.name", allow_null=True, default=None)
    created_by = serializers.CharField(source="created_by.username")
    ended_by = serializers.CharField(source="ended_by.username", allow_null=True, default=None)

    class Meta:
        model = LendingOptOut
        fields = ["id", "scope", "team", "reservation", "gpu_class", "reason", "created_by",
                  "created_at", "ended_at", "ended_by"]


class OptOutCreateSerializer(serializers.Serializer):
    scope = ChoiceField(choices=LendingOptOut.Scope.choices)
    reservation = serializers.IntegerField(min_value=1, required=False)
    team = serializers.SlugField(required=False)
    gpu_class = serializers.CharField(required=False, max_length=64)
    reason = serializers.CharField(max_length=256)

    def validate(self, attrs):
        if attrs["scope"] == LendingOptOut.Scope.RESERVATION and "reservation" not in attrs:
            raise serializers.ValidationError({"reservation": "Name the reservation."})
        if attrs["scope"] == LendingOptOut.Scope.TEAM_CLASS:
            missing = {k: f"Name the {k.replace('_', ' ')}." for k in ("team", "gpu_class")
                       if k not in attrs}
            if missing:
                raise serializers.ValidationError(missing)
        return attrs


class OptOutQuerySerializer(serializers.Serializer):
    live = serializers.BooleanField(required=False, default=False,
                                    help_text="live ones only")


class ReturnsQuerySerializer(serializers.Serializer):
    start = AwareDateTimeField(required=False)
    end = AwareDateTimeField(required=False)

    def validate(self, attrs):
        if "start" in attrs and "end" in attrs and attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": "Must be after start."})
        return attrs


class ReturnFiguresSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    returns = serializers.IntegerField()
    p50_s = serializers.IntegerField(allow_null=True)
    p95_s = serializers.IntegerField(allow_null=True)
    p99_s = serializers.IntegerField(allow_null=True)
    loans = LoanSerializer(many=True)


class PolicySerializer(serializers.Serializer):
    enabled = serializers.BooleanField()
    lend_after_idle_s = serializers.IntegerField()
    return_notice_s = serializers.IntegerField()
    scan_interval_s = serializers.FloatField()
