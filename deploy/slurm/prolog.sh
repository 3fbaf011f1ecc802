#!/bin/sh
# gpuquota's record-only Slurm prolog: writes which job holds which GPU where the node
# agent reads it (one file per GPU index: "<job id> <user> <account>"), as Princeton's
# jobstats does. It ALWAYS exits 0: a failing prolog drains the node.
# GQ_GPU_JOBS_DIR (default /run/gpuquota/gpu-jobs) is where the records go.
dir="${GQ_GPU_JOBS_DIR:-/run/gpuquota/gpu-jobs}"
[ -n "$SLURM_JOB_ID" ] || exit 0
gpus="${SLURM_JOB_GPUS:-$CUDA_VISIBLE_DEVICES}"
[ -n "$gpus" ] || exit 0
mkdir -p "$dir" 2>/dev/null || exit 0
old_ifs="$IFS"; IFS=,
for index in $gpus; do
    printf '%s %s %s\n' "$SLURM_JOB_ID" "${SLURM_JOB_USER:-}" "${SLURM_JOB_ACCOUNT:-}" \
        > "$dir/gpu$index.tmp" 2>/dev/null && mv -f "$dir/gpu$index.tmp" "$dir/gpu$index" 2>/dev/null
done
IFS="$old_ifs"
exit 0
