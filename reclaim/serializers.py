"""API shapes of reclaim. Input serializers only parse; services decide."""

from datetime import timedelta

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.models import Team
from gpuquota.core.api_fields import ChoiceField
from gpuquota.inventory.models import GpuClass
from gpuquota.reservations.models import Reservation
from gpuquota.reservations.serializers import AwareDateTimeField
from reclaim.backtest import MAX_DAYS
from reclaim.conf import RULES
from reclaim.models import Exemption, Recommendation

_user = {"allow_null": True, "read_only": True}


class RecommendationGpuSerializer(serializers.Serializer):
    gpu = serializers.CharField(source="gpu.uuid")
    node = serializers.CharField(source="gpu.node.hostname")
    index = serializers.IntegerField(source="gpu.index", allow_null=True)
    state = serializers.CharField()
    released_at = serializers.DateTimeField(allow_null=True)
    note = serializers.CharField()


class ObjectionSerializer(serializers.Serializer):
    by = serializers.CharField(source="objection_by.username", **_user)
    at = serializers.DateTimeField(source="objection_at", allow_null=True)
    reason = serializers.CharField(source="objection_reason")
    decision = serializers.CharField(source="objection_decision")
    decided_by = serializers.CharField(source="objection_decided_by.username", **_user)
    decided_at = serializers.DateTimeField(source="objection_decided_at", allow_null=True)
    decision_reason = serializers.CharField(source="objection_decision_reason")


class RecommendationSerializer(serializers.ModelSerializer):
    reservation = serializers.IntegerField(source="reservation_id")
    team = serializers.CharField(source="reservation.team.slug")
    gpu_class = serializers.CharField(source="reservation.gpu_class.name")
    gpus = RecommendationGpuSerializer(source="gpu_rows", many=True)
    savings = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    exempt = serializers.SerializerMethodField()
    exemption_reason = serializers.CharField(source="exemption.reason", allow_null=True)
    accepted_by = serializers.CharField(source="accepted_by.username", **_user)
    objection = ObjectionSerializer(source="*")
    dismissed_by = serializers.CharField(source="dismissed_by.username", **_user)
    released_by = serializers.CharField(source="released_by.username", **_user)

    class Meta:
        model = Recommendation
        fields = [
            "id", "reservation", "team", "gpu_class", "kind", "status", "gpus",
            "target_count", "evidence", "savings", "currency", "window_start", "window_end",
            "over_quota", "exempt", "exemption_reason", "accepted_by", "accepted_at",
            "grace_until", "objection", "dismissed_by", "dismissed_at", "dismissed_reason",
            "snoozed_until", "released_at", "released_by", "closed_at", "closed_note",
            "evaluated_at", "created_at", "updated_at",
        ]

    def get_exempt(self, rec: Recommendation) -> bool:
        return rec.exemption_id is not None


class DecisionReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, allow_blank=True, default="")


class ObjectionReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class DismissSerializer(ObjectionReasonSerializer):
    snooze_s = serializers.IntegerField(
        min_value=0, max_value=366 * 86400, required=False,
        help_text="Quiet for this long (default RECLAIM_SNOOZE_S).")

    def validate_snooze_s(self, value):
        return timedelta(seconds=value)


class BulkAcceptSerializer(serializers.Serializer):
    ids = serializers.ListField(child=serializers.IntegerField(min_value=1), min_length=1,
                                max_length=500)


class BulkAcceptResultSerializer(serializers.Serializer):
    accepted = serializers.ListField(child=serializers.IntegerField())
    refused = serializers.ListField(child=serializers.DictField())


class ExemptionSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug", allow_null=True)
    gpu_class = serializers.CharField(source="gpu_class.name", allow_null=True)
    reservation = serializers.IntegerField(source="reservation_id", allow_null=True)
    created_by = serializers.CharField(source="created_by.username")

    class Meta:
        model = Exemption
        fields = ["id", "reservation", "team", "gpu_class", "reason", "until", "created_by",
                  "created_at"]


class ExemptionCreateSerializer(serializers.Serializer):
    reservation = serializers.PrimaryKeyRelatedField(
        queryset=Reservation.objects.all(), required=False, allow_null=True)
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all(),
                                        required=False, allow_null=True)
    gpu_class = serializers.SlugRelatedField(slug_field="name", queryset=GpuClass.objects.all(),
                                             required=False, allow_null=True)
    reason = serializers.CharField(max_length=2000)
    until = AwareDateTimeField()


class ExemptionUpdateSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False)
    until = AwareDateTimeField(required=False)


class BacktestQuerySerializer(serializers.Serializer):
    days = serializers.IntegerField(min_value=1, max_value=MAX_DAYS, default=30)
    idle_busy_fraction = serializers.DecimalField(
        max_digits=5, decimal_places=4, min_value=0, max_value=1, required=False)
    min_coverage = serializers.DecimalField(max_digits=5, decimal_places=4, min_value=0,
                                            max_value=1, required=False)
    lookback_hours = serializers.IntegerField(min_value=1, max_value=24 * 14, required=False)
    grace_hours = serializers.IntegerField(min_value=0, max_value=24 * 14, required=False)
    rule = ChoiceField(choices=RULES, required=False)
    empty_lookback_hours = serializers.IntegerField(min_value=1, max_value=24 * 14,
                                                    required=False)
    held_lookback_hours = serializers.IntegerField(min_value=1, max_value=24 * 14,
                                                   required=False)


class BacktestReclaimSerializer(serializers.Serializer):
    reservation = serializers.IntegerField(source="reservation_id")
    team = serializers.CharField()
    recommended_at = serializers.DateTimeField()
    released_at = serializers.DateTimeField()
    gpus = serializers.SerializerMethodField()
    skipped_busy_in_grace = serializers.SerializerMethodField()
    false_reclaims = serializers.SerializerMethodField()
    gpu_hours_returned = serializers.SerializerMethodField()

    def get_gpus(self, rec) -> int:
        return len(rec.gpu_ids)

    def get_skipped_busy_in_grace(self, rec) -> int:
        return len(rec.skipped_gpu_ids)

    def get_false_reclaims(self, rec) -> int:
        return len(rec.false_gpu_ids)

    def get_gpu_hours_returned(self, rec) -> str:
        return f"{rec.returned_s / 3600:.2f}"


class RuleShareSerializer(serializers.Serializer):
    """One rule of `rules_backtest` on the same history: its false share."""

    rule = serializers.CharField()
    recommendations = serializers.IntegerField()
    gpus_released = serializers.IntegerField()
    gpu_hours_returned = serializers.DecimalField(max_digits=14, decimal_places=2)
    false_reclaims = serializers.IntegerField()
    false_reclaim_rate = serializers.DecimalField(max_digits=6, decimal_places=4)


def rule_shares(results: dict) -> list[dict]:
    """The rows of `RuleShareSerializer` for `rules_backtest`'s results."""
    return [{"rule": rule, "recommendations": len(r.recommendations),
             "gpus_released": r.gpus_released, "gpu_hours_returned": r.gpu_hours_returned,
             "false_reclaims": r.false_reclaims, "false_reclaim_rate": r.false_reclaim_rate}
            for rule, r in results.items()]


class BacktestSerializer(serializers.Serializer):
    """The backtest of the asked rule; `rules`: every rule's false share on the same
    history (from the view's context)."""

    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    policy = serializers.SerializerMethodField()
    recommendations = serializers.SerializerMethodField()
    gpus_released = serializers.IntegerField()
    gpu_hours_returned = serializers.DecimalField(max_digits=14, decimal_places=2)
    false_reclaims = serializers.IntegerField()
    false_reclaim_rate = serializers.DecimalField(max_digits=6, decimal_places=4)
    savings = serializers.DecimalField(max_digits=14, decimal_places=2, source="savings_amount")
    items = BacktestReclaimSerializer(source="recommendations", many=True)
    rules = serializers.SerializerMethodField()

    @extend_schema_field(RuleShareSerializer(many=True))
    def get_rules(self, result) -> list:
        return RuleShareSerializer(self.context.get("rules", []), many=True).data

    def get_recommendations(self, result) -> int:
        return len(result.recommendations)

    def get_policy(self, result) -> dict:
        p = result.policy
        return {"lookback_hours": int(p.lookback.total_seconds()) // 3600,
                "idle_busy_fraction": str(p.idle_busy_fraction),
                "min_coverage": str(p.min_coverage),
                "grace_hours": str(p.grace.total_seconds() / 3600), "rule": p.rule,
                "empty_lookback_hours": int(p.empty_lookback.total_seconds()) // 3600,
                "held_lookback_hours": int(p.held_lookback.total_seconds()) // 3600}


class FiguresSerializer(serializers.Serializer):
    reclaimable_gpus = serializers.IntegerField()
    reclaimable_gpu_hours = serializers.DecimalField(max_digits=14, decimal_places=2)
    reclaimable_savings = serializers.DecimalField(max_digits=14, decimal_places=2)
    reclaimed_gpu_hours = serializers.DecimalField(max_digits=14, decimal_places=2)
    saved = serializers.DecimalField(max_digits=14, decimal_places=2)
    currency = serializers.CharField()
