"""An agent's sample records judged a column at a time (`ingest/columns.py`) come out exactly
as judged one by one (`Judge.sample`): the same rows in the same order, the same values
nulled and clamped, the same records rejected with the same paths. A plain batch never asks
the per-record judge; a batch with an odd sample asks it only for that GPU's samples."""

from datetime import UTC, datetime, timedelta

import pytest

from gpuquota.ingest import conf
from gpuquota.ingest.columns import records_judge, samples_judge
from gpuquota.ingest.protocol import (
    SAMPLE_SHAPE,
    CheckedRecords,
    ProtocolError,
    _fit_at_once,
    _fitting,
    batch_check,
)
from gpuquota.ingest.records import GpuRef, Judge
from tests.ingest.factories import batch, sample

NOW = datetime(2026, 11, 2, 12, tzinfo=UTC)
START = NOW - timedelta(hours=2)
GPUS = ["GPU-8932f937-d72c-4106-c12f-20bd9faed9f" + str(i) for i in range(4)]
MIG = "MIG-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
UNKNOWN = "GPU-63bc0b91-2265-1b94-831c-15c41fe92675"
H200 = {"memory_total_bytes": 150754820096, "power_limit_w": 700.0}
REFS = {uuid: GpuRef(id=i + 1, physical_id=i + 1, **H200) for i, uuid in enumerate(GPUS)}
REFS[MIG] = GpuRef(id=9, physical_id=1, memory_total_bytes=20 * 2**30, power_limit_w=None)

ODD = [  # each makes its sample not plain, for the judge to decide
    {"util_gpu_avg": 100.004},
    {"util_gpu_avg": 101.0},
    {"util_gpu_avg": -0.5},
    {"util_gpu_max": 100.0001},
    {"util_mem_avg": float("nan")},
    {"util_gpu_max": 5.0},  # avg above max: nulled
    {"util_gpu_avg": 40.005, "util_gpu_max": 40.0},  # above, within the slack: kept
    {"memory_used_bytes_avg": 70123456513},  # above max: nulled
    {"memory_used_bytes_max": 150754820097},  # above the GPU's memory: nulled
    {"memory_used_bytes_avg": 61203283968.0},  # a float: truncated to an int
    {"power_w_avg": 2101.0},
    {"energy_j": 126001.0},
    {"energy_j": float("inf")},
    {"power_w_avg": 10**400},
    {"temp_c_max": 71.5},
    {"temp_c_max": 151},
    {"temp_c_max": -41},
    {"readings": 6.0},
    {"readings": -1},
    {"readings": 2**31},
    {"clock_event_reasons": 4.0},
    {"ecc_uncorrected": -1},
    {"ecc_corrected": 2**63},
    {"sm_active_avg": 100.01},
    {"dram_active_avg": -1.0},
    {"sm_occupancy_avg": float("nan")},
    {"gpu_uuid": UNKNOWN},
    {"gpu_uuid": "not-a-uuid"},
    {"window_start": "2026-11-02T10:00"},
    {"window_end": "2026-11-02T09:00:00Z"},
    {"window_start": "2026-10-20T10:00:00Z"},
]
PLACING = ("gpu_uuid", "window_start", "window_end")


def _records(windows: int = 12, gpus=GPUS) -> list[dict]:
    """A node's batch as the agent sends it: window by window, each GPU in turn."""
    return [
        sample(uuid, START + timedelta(minutes=w), util_gpu_avg=float(10 * i + w), seq=w)
        for w in range(windows)
        for i, uuid in enumerate(gpus)
    ]


class CountingJudge(Judge):
    asked: list

    def sample(self, index, record, received_at):
        self.asked.append(index)
        super().sample(index, record, received_at)


def _judges(records: list, *, checked: bool = False) -> tuple[Judge, CountingJudge]:
    """The per-record judge's outcome and the column judge's: of the records as a list, or
    (`checked`) as the structure check leaves them when they fit at once, their columns and
    types read already (an odd type that does not fit is judged from the list)."""
    if checked:
        records = _fitting(records, SAMPLE_SHAPE) or records
    by_record = Judge(gpus=REFS, now=NOW, boot_pk=5, receipt_pk=9)
    for index, record in enumerate(records):
        by_record.sample(index, record, NOW)
    by_column = CountingJudge(gpus=REFS, now=NOW, boot_pk=5, receipt_pk=9)
    by_column.asked = []
    samples_judge(by_column, records, NOW)
    return by_record, by_column


@pytest.mark.parametrize("checked", [False, True])
def test_a_plain_batch_is_judged_at_once(checked):
    records = _records()
    assert type(_fitting(records, SAMPLE_SHAPE)) is CheckedRecords
    by_record, by_column = _judges(records, checked=checked)
    assert by_column.out == by_record.out
    assert len(by_column.out.samples) == len(records) and not by_column.out.nulled
    assert by_column.asked == []
    assert by_column.out.samples[1] == (
        2,
        START,
        START + timedelta(minutes=1),
        6,
        10.0,
        100.0,
        41.0,
        61203283968,
        70123456512,
        512.0,
        30720.0,
        71,
        4,
        0,
        0,
        None,
        None,
        None,
        None,
        NOW,
        5,
        9,
    )


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("odd", ODD)
def test_an_odd_sample_among_plain_ones_is_judged_as_the_agents(odd, checked):
    records = _records()
    records[13].update(odd)  # the fourth window's second GPU
    by_record, by_column = _judges(records, checked=checked)
    assert by_column.out == by_record.out
    if odd.keys() & set(PLACING):  # its GPU's other samples are plain
        assert by_column.asked == [13]
    else:
        assert by_column.asked == list(range(1, len(records), len(GPUS)))


@pytest.mark.parametrize("checked", [False, True])
def test_gpus_of_other_sizes_are_checked_one_by_one(checked):
    """A MIG device's memory bound is its own: its samples and the others' are plain."""
    records = _records(gpus=[*GPUS, MIG])
    for record in records[4::5]:
        record.update(
            memory_used_bytes_avg=2**30,
            memory_used_bytes_max=2**31,
            power_w_avg=None,
            energy_j=None,
        )
    records[9]["memory_used_bytes_max"] = 21 * 2**30  # above the MIG device's memory
    by_record, by_column = _judges(records, checked=checked)
    assert by_column.out == by_record.out
    assert by_column.asked == list(range(4, len(records), 5))


def test_records_judge_judges_events_and_processes_too():
    body = batch(
        samples=_records(windows=2),
        events=[
            {
                "event_id": "6f1c3a52-8d4e-4b7a-9c2f-1e5d7a3b9c04",
                "gpu_uuid": GPUS[0],
                "ts": "2026-11-02T11:00:30Z",
                "type": "xid",
                "xid": 79,
            }
        ],
    )
    outcome = records_judge(body=body, gpus=REFS, node_id=3, now=NOW, boot_pk=5, receipt_pk=9)
    assert len(outcome.samples) == 8 and len(outcome.events) == 1


def test_the_structure_of_plain_records_is_checked_a_field_at_a_time():
    records = _records(windows=3)
    assert _fit_at_once(records, SAMPLE_SHAPE)
    records[5]["readings"] = 6.0  # an integer as JSON may write it: still taken...
    assert not _fit_at_once(records, SAMPLE_SHAPE)
    batch_check(batch(samples=records))  # ...by the record-by-record check
    records[7]["util_gpu_avg"] = "87.5"
    with pytest.raises(ProtocolError) as refused:
        batch_check(batch(samples=records))
    assert refused.value.errors == [("samples[7].util_gpu_avg", "must be a number")]


def test_a_checked_batch_keeps_its_samples_columns_and_is_checked_alike_again(monkeypatch):
    records = _records(windows=3)
    body = batch_check(batch(samples=records))
    checked = body["samples"]
    assert type(checked) is CheckedRecords and checked == records
    assert checked.columns["util_gpu_avg"] == tuple(r["util_gpu_avg"] for r in records)
    assert checked.types["sm_active_avg"] == {type(None)}
    assert batch_check(body)["samples"] == records  # a second check (an importer's) passes
    monkeypatch.setattr(conf, "MAX_SAMPLES", 5)
    with pytest.raises(ProtocolError) as refused:
        batch_check(body)
    assert refused.value.status == 413
