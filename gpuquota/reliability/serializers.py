"""The reliability API's shapes (docs/api.md, Reliability)."""

from rest_framework import serializers

from gpuquota.core.api_fields import AwareDateTimeField, ChoiceField
from gpuquota.reliability.selectors import GROUPS


class ReliabilityAsOfQuerySerializer(serializers.Serializer):
    as_of = AwareDateTimeField(required=False, help_text="The instant to evaluate at (default "
                               "now): only what was recorded by then counts, so history "
                               "replays.")


class ReliabilityLemonQuerySerializer(ReliabilityAsOfQuerySerializer):
    kind = ChoiceField(choices=["gpu", "node"], required=False, default="gpu")


class ReliabilityFiguresQuerySerializer(ReliabilityAsOfQuerySerializer):
    group = ChoiceField(choices=list(GROUPS), required=False, default="class")
    days = serializers.IntegerField(required=False, default=90, min_value=1, max_value=366)


class ReliabilityFlagSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="gpu or node")
    key = serializers.CharField(help_text="The GPU's UUID, or cluster/hostname")
    gpu_class = serializers.CharField()
    cluster = serializers.CharField()
    score = serializers.FloatField(help_text="-log10 of the p-value (higher: more surprising)")
    p_value = serializers.FloatField(help_text="Poisson upper tail of its hardware incidents "
                                     "(failures and warnings) against the class's rate, "
                                     "combined by Fisher's method with that of its failed "
                                     "jobs when its class ran jobs")
    failures = serializers.IntegerField(help_text="Hardware failures in the last 180 days")
    warnings = serializers.IntegerField(help_text="Hardware warnings in the last 180 days")
    expected = serializers.FloatField(help_text="The incidents (failures and warnings) its "
                                      "class's rate would give it")
    jobs_failed = serializers.IntegerField(help_text="Its jobs (the one-GPU jobs of a GPU, "
                                           "the one-node jobs of a node) that failed, "
                                           "FAILED or NODE_FAIL, with no hardware failure "
                                           "behind them, in the last 180 days")
    jobs_expected = serializers.FloatField(allow_null=True, help_text="The failed jobs its "
                                           "class's rate per job-day would give its job-days "
                                           "(the users' own failures: every GPU sees them); "
                                           "null when it or its class ran no such job")
    first_flagged = serializers.DateTimeField()
    evidence = serializers.ListField(child=serializers.CharField())


class ReliabilityLemonListSerializer(serializers.Serializer):
    as_of = serializers.DateTimeField()
    kind = serializers.CharField()
    flagged = ReliabilityFlagSerializer(many=True)


class ReliabilityFiguresSerializer(serializers.Serializer):
    key = serializers.CharField()
    gpus = serializers.IntegerField()
    gpu_days = serializers.FloatField()
    failures = serializers.IntegerField()
    hardware_warnings = serializers.IntegerField()
    failures_per_1000_gpu_days = serializers.FloatField(allow_null=True)
    ci95_low = serializers.FloatField(allow_null=True, help_text="Exact (Garwood) 95% interval")
    ci95_high = serializers.FloatField(allow_null=True)
    jobs_killed = serializers.IntegerField(help_text="Slurm jobs a failure ended (NODE_FAIL, "
                                           "or ended within 10 minutes of a failure) and "
                                           "pods evicted or deleted for a node's trouble")
    gpu_hours_lost = serializers.FloatField(help_text="Those jobs' GPU-hours")
    mtbf_days = serializers.FloatField(allow_null=True)
    mttr_hours = serializers.FloatField(allow_null=True,
                                        help_text="Failed -> back in service, closed intervals")
    availability = serializers.FloatField(allow_null=True)
    by_component = serializers.DictField(child=serializers.IntegerField())
    by_action = serializers.DictField(child=serializers.IntegerField())


class ReliabilityFiguresListSerializer(serializers.Serializer):
    as_of = serializers.DateTimeField()
    group = serializers.CharField()
    days = serializers.IntegerField()
    figures = ReliabilityFiguresSerializer(many=True)
