"""The job reports' API shapes (docs/jobs.md, The API)."""

from rest_framework import serializers


class JobQuerySerializer(serializers.Serializer):
    team = serializers.SlugField(required=False, help_text="team slug (404 if not visible)")
    mine = serializers.BooleanField(required=False, help_text="only the caller's own jobs")
    cluster = serializers.SlugField(required=False, help_text="cluster slug")
    job_id = serializers.CharField(required=False, max_length=256,
                                   help_text="the scheduler's job id, or the pod's name")
    days = serializers.IntegerField(required=False, min_value=1, max_value=366,
                                    help_text="jobs that ran in the last N days (default 7)")


class JobNoteSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="gpus_unused, memory_held_idle, idle_tail, "
                                           "mig_sized, interactive_idle, input_bound, "
                                           "low_utilization, short_job, time_limit_far, "
                                           "tensor_cores_unused")
    severity = serializers.CharField(help_text="waste (costs GPU-hours) or advice")
    title = serializers.CharField()
    advice = serializers.CharField()
    wasted_gpu_s = serializers.IntegerField()
    wasted_cost = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)


class JobSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    cluster = serializers.CharField(source="cluster.slug")
    source = serializers.CharField()
    job_id = serializers.CharField()
    user = serializers.CharField(source="user_name")
    owner = serializers.CharField(source="owner.username", allow_null=True, default=None)
    team = serializers.CharField(source="team.slug", allow_null=True, default=None)
    state = serializers.CharField()
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    gpus = serializers.IntegerField(source="gpus_held")
    reported_at = serializers.DateTimeField(allow_null=True,
                                            help_text="null: running or not settled yet")
    held_gpu_s = serializers.IntegerField()
    idle_gpu_s = serializers.IntegerField()
    wasted_gpu_s = serializers.IntegerField()
    util_avg_pct = serializers.DecimalField(max_digits=5, decimal_places=1, allow_null=True)
    cost = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    wasted_cost = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    currency = serializers.CharField()
    notes = JobNoteSerializer(many=True)


class ProfilingSerializer(serializers.Serializer):
    """DCGM's profiling fields, as percentages over the sampled windows that carry each
    (null for a field its source did not have)."""

    sm_active_pct = serializers.FloatField(allow_null=True, help_text="DCGM_FI_PROF_SM_ACTIVE")
    sm_occupancy_pct = serializers.FloatField(allow_null=True,
                                              help_text="DCGM_FI_PROF_SM_OCCUPANCY")
    tensor_active_pct = serializers.FloatField(allow_null=True,
                                               help_text="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    dram_active_pct = serializers.FloatField(allow_null=True, help_text="DCGM_FI_PROF_DRAM_ACTIVE")


NO_PROFILING = "null: no profiling data (never 0)"


class JobGpuSerializer(serializers.Serializer):
    gpu = serializers.CharField(help_text="node/index")
    gpu_class = serializers.CharField()
    sampled_s = serializers.IntegerField()
    idle_s = serializers.IntegerField()
    util_avg_pct = serializers.FloatField(allow_null=True)
    util_max_pct = serializers.FloatField(allow_null=True)
    memory_max_bytes = serializers.IntegerField(allow_null=True)
    memory_total_bytes = serializers.IntegerField(allow_null=True)
    energy_j = serializers.FloatField()
    profiling = ProfilingSerializer(allow_null=True, help_text=NO_PROFILING)
    utilization = serializers.ListField(
        child=serializers.ListField(), help_text="[[bucket start, mean % or null], ...]")


class JobReportSerializer(serializers.Serializer):
    """A job's report as computed now (a running job: up to now)."""

    job = JobSerializer()
    duration_s = serializers.IntegerField()
    held_gpu_s = serializers.IntegerField()
    sampled_gpu_s = serializers.IntegerField()
    idle_gpu_s = serializers.IntegerField()
    idle_share_pct = serializers.FloatField(allow_null=True)
    util_avg_pct = serializers.FloatField(allow_null=True)
    wasted_gpu_s = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    wasted_cost = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    currency = serializers.CharField()
    energy_j = serializers.FloatField()
    profiling = ProfilingSerializer(allow_null=True, help_text=NO_PROFILING)
    gpus = JobGpuSerializer(many=True)
    notes = JobNoteSerializer(many=True)
