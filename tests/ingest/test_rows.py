"""Records built in-process as rows (`ingest/rows.py`, the telemetry importer's) are judged
exactly as the same records sent by an agent: the same rows stored, the same values nulled
and clamped, the same records rejected, with the same paths."""

from datetime import UTC, datetime

import pytest

from gpuquota.ingest.columns import records_judge
from gpuquota.ingest.records import GpuRef, Judge
from gpuquota.ingest.rows import (
    ProcessRow,
    Rows,
    _run_plain,
    _sample_plain,
    process_record,
    rows_judge,
    sample_record,
)

NOW = datetime(2026, 11, 2, 12, tzinfo=UTC)
T = int(NOW.timestamp()) - 3600
GPU = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"
LIMITED = "GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
UNKNOWN = "GPU-63bc0b91-2265-1b94-831c-15c41fe92675"
GPUS = {GPU: GpuRef(id=1, physical_id=1, memory_total_bytes=None, power_limit_w=None),
        LIMITED: GpuRef(id=2, physical_id=2, memory_total_bytes=1000, power_limit_w=100.0)}

NO_PROFILING = (None,) * 4
PLAIN = (GPU, T, T + 60, 2, 37.5, 40.0, 1024, 2048, 300.0, 18000.0, 61, None, None,
         55.0, 40.0, 12.5, 30.0)  # DCGM profiling: SM, occupancy, tensor, DRAM
SAMPLES = [
    PLAIN,
    (GPU, T + 120, T + 180, 2, 1.0, 1.0, None, None, None, None, None, None, None,
     101.0, -1.0, 100.004, None),  # profiling out of range: nulled, clamped
    (GPU, T + 60, T + 100, 1, None, None, None, None, None, None, None, 0, 0, *NO_PROFILING),
    # clamped
    (GPU, T, T + 60, 2, 100.005, 100.0, None, None, None, None, None, None, None, *NO_PROFILING),
    # avg > max
    (GPU, T, T + 60, 2, 50.0, 40.0, None, None, None, None, None, None, None, *NO_PROFILING),
    # in slack
    (GPU, T, T + 60, 2, 40.005, 40.0, None, None, None, None, None, None, None, *NO_PROFILING),
    (GPU, T, T + 60, 2, 101.0, None, 5, 4, -1.0, float("inf"), 151, -1, 3, *NO_PROFILING),
    (LIMITED, T, T + 60, 2, None, None, 900, 1001, 301.0, 18001.0, -41, None, None, *NO_PROFILING),
    (LIMITED, T, T + 60, 2, None, None, 900, 1000, 300.0, 18000.0, -40, None, None, *NO_PROFILING),
    (UNKNOWN, T, T + 60, 2, 1.0, 1.0, None, None, None, None, None, None, None, *NO_PROFILING),
    # too long
    (GPU, T, T + 601, 2, 1.0, 1.0, None, None, None, None, None, None, None, *NO_PROFILING),
    (GPU, T + 7200, T + 7260, 2, 1.0, 1.0, None, None, None, None, None, None, None, *NO_PROFILING),
    (GPU, T, T + 60, -1, 1.0, 1.0, None, None, None, None, None, None, None, *NO_PROFILING),
]
PROCESSES = [
    ProcessRow(GPU, T, T + 60, 77, 3, "python", "kubernetes", "llm-0", "nlp", 1024),
    ProcessRow(GPU, T, T + 60, 78, 3, None, "slurm", "4242", None, None, user="alice"),
    ProcessRow(GPU, T, T + 60, 79, 3, "x" * 257, "pbs", "1", "a\x00b", 10**20),
    ProcessRow(LIMITED, T, T + 60, 80, 3, None, None, None, None, 1001),
    ProcessRow(GPU, T, T + 60, 0, 3, None, None, None, None, None),
    ProcessRow(UNKNOWN, T, T + 60, 81, 3, None, None, None, None, None),
    ProcessRow(GPU, T + 60, T + 30, 82, 3, None, None, None, None, None),
]
EVENTS = [{"event_id": "6f1c3a52-8d4e-4b7a-9c2f-1e5d7a3b9c04", "gpu_uuid": GPU,
           "ts": "2026-11-02T11:00:30Z", "type": "xid", "xid": 79}]


def _outcomes(samples: list, processes: list):
    judge = Judge(gpus=GPUS, now=NOW, check_age=False, boot_pk=5, receipt_pk=9)
    by_rows = rows_judge(body={"events": EVENTS}, rows=Rows(samples, processes), judge=judge,
                         node_id=3, now=NOW)
    body = {"samples": [sample_record(r) for r in samples],
            "processes": [process_record(r) for r in processes], "events": EVENTS}
    by_records = records_judge(body=body, gpus=GPUS, node_id=3, now=NOW, check_age=False,
                               boot_pk=5, receipt_pk=9)
    return by_rows, by_records


def test_rows_are_judged_as_the_agents_records():
    by_rows, by_records = _outcomes(SAMPLES, PROCESSES)
    assert by_rows == by_records
    assert len(by_rows.samples) == 9 and len(by_rows.processes) == 4
    assert len(by_rows.rejected) == 7 and len(by_rows.nulled) > 10
    assert by_rows.samples[0][:6] == (1, datetime.fromtimestamp(T, UTC),
                                      datetime.fromtimestamp(T + 60, UTC), 2, 37.5, 40.0)
    assert by_rows.samples[0][-7:-3] == (55.0, 40.0, 12.5, 30.0)  # SM, occupancy, tensor, DRAM
    assert by_rows.samples[1][-7:-3] == (None, None, 100.0, None)  # nulled, nulled, clamped
    assert {n["path"] for n in by_rows.nulled} >= {"samples[1].sm_active_avg",
                                                   "samples[1].sm_occupancy_avg"}


@pytest.mark.parametrize("row", SAMPLES)
def test_each_sample_row_alone(row):
    by_rows, by_records = _outcomes([row], [])
    assert by_rows == by_records


@pytest.mark.parametrize("row", PROCESSES)
def test_each_process_row_alone(row):
    by_rows, by_records = _outcomes([], [row])
    assert by_rows == by_records


def _run_with(odd: tuple) -> list:
    """A GPU's run of plain rows (one a window, as the importer sends them) with `odd`,
    moved to the run's GPU and windows, in the middle."""
    run = [(GPU, T + 60 * i, T + 60 * (i + 1), *PLAIN[3:]) for i in range(6)]
    run[3] = (GPU, T + 180, T + 180 + (odd[2] - odd[1]), *odd[3:])
    return run


@pytest.mark.parametrize("odd", [r for r in SAMPLES if r[0] == GPU and r is not PLAIN]
                         + [(GPU, T, T + 60, 2, float("nan"), 40.0, 1024, 2048, 300.0, 1.0,
                             61, None, None, *NO_PROFILING),
                            (GPU, T, T + 60, True, 37.5, 40.0, 1024, 2048, 300.0, 1.0, 61,
                             None, None, *NO_PROFILING),
                            (GPU, T, T + 60, 2, 37.5, 40.0, 4096, 2048, 300.0, 1.0, 61, None,
                             None, *NO_PROFILING),
                            (GPU, T, T + 60, 2, 37.5, 40.0, 1024, 2048, 300.0, 1.0, 61, None,
                             None, 55.0, float("nan"), 12.5, 30.0)])
def test_a_gpus_run_is_checked_at_once_and_an_odd_row_still_judged(odd):
    """The rows of one GPU are checked at once (`_run_plain`: plain where every row is);
    a run with one odd row is judged row by row, so the odd row is nulled, clamped or
    rejected as the agent's."""
    run = _run_with(odd)
    assert _run_plain(run[:3] + run[4:], GPUS[GPU])
    assert _run_plain(run, GPUS[GPU]) == _sample_plain(run[3], GPUS[GPU], 60)
    by_rows, by_records = _outcomes(run, [])
    assert by_rows == by_records
