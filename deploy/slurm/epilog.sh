#!/bin/sh
# gpuquota's record-only Slurm epilog: removes the records prolog.sh wrote for the ending
# job, so a later process on the GPU outside Slurm is never taken for it. It ALWAYS exits 0:
# a failing epilog drains the node.
dir="${GQ_GPU_JOBS_DIR:-/run/gpuquota/gpu-jobs}"
[ -n "$SLURM_JOB_ID" ] && [ -d "$dir" ] || exit 0
for record in "$dir"/gpu*; do
    [ -f "$record" ] || continue
    read -r job _rest < "$record" 2>/dev/null || continue
    [ "$job" = "$SLURM_JOB_ID" ] && rm -f "$record" 2>/dev/null
done
exit 0
