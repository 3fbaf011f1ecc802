"""Tier two: the validation table, record by record; the rest of the batch is stored (202)."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from gpuquota.ingest.models import GpuEvent, ProcessRecord, Sample
from gpuquota.inventory.models import Gpu
from tests.ingest.factories import (
    Agent,
    batch,
    enrolled,
    event,
    gpu_entry,
    iso,
    new_gpu_uuid,
    process,
    recent_minute,
    sample,
)

pytestmark = pytest.mark.django_db

NVML_UUID = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"  # not RFC 4122: variant nibble is c
MIG_UUID = "MIG-2ed9a8c6-2b3a-5c5f-9f5a-6f1b9c3e1d2a"


@pytest.fixture
def agent():
    return Agent(enrolled().key, Client())


@pytest.fixture
def gpu():
    return new_gpu_uuid()


def send_one(agent, gpu, *, kind="samples", **fields):
    start = recent_minute()
    make = {"samples": sample, "processes": process}[kind]
    record = make(gpu, start)
    record.update(fields)
    good = make(gpu, start - timedelta(minutes=1))
    response = agent.post(batch(gpus=[gpu_entry(gpu)], **{kind: [good, record]}))
    assert response.status_code == 202, response.json()
    return response.json()


def paths(items) -> list[str]:
    return [item["path"] for item in items]


def test_real_nvml_uuid_and_mig_uuid_are_accepted(agent):
    start = recent_minute()
    body = batch(gpus=[gpu_entry(NVML_UUID), gpu_entry(MIG_UUID, index=1, parent=NVML_UUID)],
                 samples=[sample(NVML_UUID, start), sample(MIG_UUID, start)])
    response = agent.post(body)
    assert response.json()["samples"]["stored"] == 2, response.json()
    mig = Gpu.objects.get(uuid=MIG_UUID)
    assert mig.parent.uuid == NVML_UUID
    assert mig.gpu_class == mig.parent.gpu_class


def test_uuid_case_is_normalised(agent):
    upper = "GPU-8932F937-D72C-4106-C12F-20BD9FAED9F6"
    response = agent.post(batch(gpus=[gpu_entry(upper)], samples=[sample(upper, recent_minute())]))
    assert response.json()["samples"]["stored"] == 1
    assert Gpu.objects.get().uuid == NVML_UUID


@pytest.mark.parametrize("bad", ["GPU-123", "8932f937-d72c-4106-c12f-20bd9faed9f6",
                                 "GPU-8932f937-d72c-4106-c12f-20bd9faed9fz", "gpu-8932f937-d72c"])
def test_bad_gpu_uuid_rejects_the_record(agent, gpu, bad):
    body = send_one(agent, gpu, gpu_uuid=bad)
    assert paths(body["rejected"]) == ["samples[1].gpu_uuid"]
    assert body["samples"]["stored"] == 1


def test_gpu_neither_listed_nor_known_is_rejected(agent, gpu):
    other = new_gpu_uuid()
    body = agent.post(batch(gpus=[gpu_entry(gpu)], samples=[
        sample(gpu, recent_minute()), sample(other, recent_minute())])).json()
    assert body["rejected"] == [{"path": "samples[1].gpu_uuid",
                                 "why": "unknown GPU: not listed in gpus nor known for this node"}]


def test_gpu_known_for_this_node_need_not_be_listed(agent, gpu):
    agent.post(batch(gpus=[gpu_entry(gpu)]))
    body = agent.post(batch(samples=[sample(gpu, recent_minute())])).json()
    assert body["samples"]["stored"] == 1 and body["rejected"] == []


@pytest.mark.parametrize("fields, path", [
    ({"window_start": "2026-11-29T16:44:00.500Z"}, "samples[1].window_start"),
    ({"window_start": "2026-11-29 16:44"}, "samples[1].window_start"),
    ({"window_start": "2026-11-29T16:44:00"}, "samples[1].window_start"),  # no time zone
    ({"window_end": "soon"}, "samples[1].window_end"),
])
def test_window_not_whole_seconds_or_not_instants_rejects(agent, gpu, fields, path):
    body = send_one(agent, gpu, **fields)
    assert paths(body["rejected"]) == [path]
    assert body["samples"]["stored"] == 1


@pytest.mark.parametrize("length_s, ok", [(0, False), (-60, False), (1, True), (600, True),
                                          (601, False)])
def test_window_length_is_1_to_600_seconds(agent, gpu, length_s, ok):
    start = recent_minute(20)
    body = send_one(agent, gpu, window_start=iso(start),
                    window_end=iso(start + timedelta(seconds=length_s)))
    assert (body["rejected"] == []) is ok
    assert body["samples"]["stored"] == (2 if ok else 1)


def test_window_end_at_most_5_minutes_ahead(agent, gpu):
    now = timezone.now().replace(microsecond=0)
    ok = send_one(agent, gpu, window_start=iso(now + timedelta(seconds=200)),
                  window_end=iso(now + timedelta(seconds=260)))
    assert ok["rejected"] == []
    late = send_one(agent, gpu, window_start=iso(now + timedelta(seconds=300)),
                    window_end=iso(now + timedelta(seconds=360)))
    assert paths(late["rejected"]) == ["samples[1].window_end"]


def test_window_start_at_most_8_days_back(agent, gpu):
    now = timezone.now().replace(second=0, microsecond=0)
    ok = send_one(agent, gpu, window_start=iso(now - timedelta(days=8) + timedelta(minutes=2)),
                  window_end=iso(now - timedelta(days=8) + timedelta(minutes=3)))
    assert ok["rejected"] == []
    old = send_one(agent, gpu, window_start=iso(now - timedelta(days=8, minutes=2)),
                   window_end=iso(now - timedelta(days=8, minutes=1)))
    assert paths(old["rejected"]) == ["samples[1].window_start"]


def test_readings_must_not_be_negative(agent, gpu):
    assert paths(send_one(agent, gpu, readings=-1)["rejected"]) == ["samples[1].readings"]
    assert send_one(agent, gpu, readings=0)["rejected"] == []


def stored_sample(gpu) -> Sample:
    return Sample.objects.filter(gpu__uuid=gpu).order_by("-window_start").first()


@pytest.mark.parametrize("field", ["util_gpu_avg", "util_gpu_max", "util_mem_avg"])
@pytest.mark.parametrize("value, stored", [(-0.5, None), (100.5, None), (100.01, Decimal("100")),
                                           (0, Decimal("0")), (100, Decimal("100"))])
def test_percentages_0_to_100_with_clamped_tolerance(agent, gpu, field, value, stored):
    extra = {"util_gpu_max": 100.0} if field == "util_gpu_avg" else {}
    if field == "util_gpu_max":
        extra = {"util_gpu_avg": 0}
    body = send_one(agent, gpu, **{field: value}, **extra)
    assert body["rejected"] == []
    assert (paths(body["nulled"]) == [f"samples[1].{field}"]) is (stored is None)
    assert getattr(stored_sample(gpu), field) == stored


@pytest.mark.parametrize("field", ["sm_active_avg", "sm_occupancy_avg", "tensor_active_avg",
                                   "dram_active_avg"])
def test_profiling_percentages_are_stored_and_absent_is_no_data(agent, gpu, field):
    body = send_one(agent, gpu, **{field: 37.5})
    assert body["nulled"] == [] and getattr(stored_sample(gpu), field) == Decimal("37.5")
    over, silent = new_gpu_uuid(), new_gpu_uuid()
    assert paths(send_one(agent, over, **{field: 140})["nulled"]) == [f"samples[1].{field}"]
    send_one(agent, silent)  # an agent that reads no profiling field: null, never 0
    assert getattr(stored_sample(silent), field) is None


def test_util_avg_above_max_nulls_the_avg(agent, gpu):
    body = send_one(agent, gpu, util_gpu_avg=90.02, util_gpu_max=90.0)
    assert paths(body["nulled"]) == ["samples[1].util_gpu_avg"]
    assert stored_sample(gpu).util_gpu_avg is None
    assert stored_sample(gpu).util_gpu_max == Decimal("90")
    assert send_one(agent, gpu, util_gpu_avg=90.01, util_gpu_max=90.0)["nulled"] == []


@pytest.mark.parametrize("avg, max_", [(2.02, 2.01), (0.07, 0.06), (0.1, 0.09), (50.01, 50.0)])
def test_util_avg_a_hundredth_above_max_is_kept_exactly(agent, gpu, avg, max_):
    body = send_one(agent, gpu, util_gpu_avg=avg, util_gpu_max=max_)
    assert body["nulled"] == []
    assert stored_sample(gpu).util_gpu_avg == Decimal(str(avg))


def test_infinite_number_is_nulled_not_stored(agent):
    gpu = new_gpu_uuid()
    entry = gpu_entry(gpu, power_limit_w=None)
    body = batch(gpus=[entry], samples=[sample(gpu, recent_minute(), power_w_avg=1.0)])
    raw = json.dumps(body).replace('"power_w_avg": 1.0', '"power_w_avg": 1e400').encode()
    response = agent.post(None, raw=raw).json()
    assert paths(response["nulled"]) == ["samples[0].power_w_avg"]
    assert stored_sample(gpu).power_w_avg is None


@pytest.mark.parametrize("fields, nulled", [
    ({"memory_used_bytes_avg": -1}, ["memory_used_bytes_avg"]),
    ({"memory_used_bytes_max": 150754820097}, ["memory_used_bytes_max"]),
    ({"memory_used_bytes_avg": 2, "memory_used_bytes_max": 1}, ["memory_used_bytes_avg"]),
    ({"memory_used_bytes_avg": 150754820096, "memory_used_bytes_max": 150754820096}, []),
    ({"power_w_avg": -1.0}, ["power_w_avg"]),
    ({"power_w_avg": 2100.5}, ["power_w_avg"]),  # 3 x 700 W
    ({"power_w_avg": 2100.0}, []),
    ({"energy_j": -0.1}, ["energy_j"]),
    ({"energy_j": 2100.0 * 60 + 1}, ["energy_j"]),
    ({"energy_j": 2100.0 * 60}, []),
    ({"temp_c_max": -41}, ["temp_c_max"]),
    ({"temp_c_max": 151}, ["temp_c_max"]),
    ({"temp_c_max": -40}, []),
    ({"ecc_uncorrected": -1}, ["ecc_uncorrected"]),
    ({"ecc_corrected": -3}, ["ecc_corrected"]),
    ({"clock_event_reasons": 2**64 - 1}, ["clock_event_reasons"]),
    ({"clock_event_reasons": 2**70}, ["clock_event_reasons"]),  # beyond what orjson reads
])
def test_nullable_fields_out_of_range_are_nulled(agent, gpu, fields, nulled):
    body = send_one(agent, gpu, **fields)
    assert paths(body["nulled"]) == [f"samples[1].{name}" for name in nulled]
    assert body["samples"]["stored"] == 2
    row = stored_sample(gpu)
    for name in nulled:
        assert getattr(row, name) is None


def test_limits_unknown_skip_their_rules(agent):
    gpu = new_gpu_uuid()
    entry = gpu_entry(gpu, memory_total_bytes=None, power_limit_w=None)
    record = sample(gpu, recent_minute(), memory_used_bytes_max=10**15, power_w_avg=99999.0,
                    energy_j=10**9)
    body = agent.post(batch(gpus=[entry], samples=[record])).json()
    assert body["nulled"] == [] and body["samples"]["stored"] == 1


@pytest.mark.parametrize("field", ["util_gpu_avg", "util_gpu_max", "util_mem_avg",
                                   "memory_used_bytes_avg", "memory_used_bytes_max",
                                   "power_w_avg", "energy_j", "temp_c_max",
                                   "clock_event_reasons", "ecc_uncorrected", "ecc_corrected"])
def test_nullable_sample_fields_accept_null(agent, gpu, field):
    body = send_one(agent, gpu, **{field: None})
    assert body["rejected"] == [] and body["nulled"] == []
    assert getattr(stored_sample(gpu), field) is None


def test_absent_nullable_fields_are_null(agent, gpu):
    start = recent_minute()
    minimal = {"gpu_uuid": gpu, "window_start": iso(start),
               "window_end": iso(start + timedelta(seconds=60)), "readings": 0}
    body = agent.post(batch(gpus=[gpu_entry(gpu)], samples=[minimal])).json()
    assert body["samples"]["stored"] == 1
    assert stored_sample(gpu).util_gpu_avg is None


@pytest.mark.parametrize("pid, ok", [(0, False), (1, True), (4194304, True), (4194305, False),
                                     (-5, False)])
def test_pid_is_1_to_4194304(agent, gpu, pid, ok):
    body = send_one(agent, gpu, kind="processes", pid=pid)
    assert (paths(body["rejected"]) == ["processes[1].pid"]) is not ok
    assert body["processes"]["stored"] == (2 if ok else 1)


def test_process_strings_at_most_256_and_nullable(agent, gpu):
    body = send_one(agent, gpu, kind="processes", command="x" * 257, user="u" * 256,
                    job={"source": "slurm", "id": "1", "account": "a" * 257})
    assert paths(body["nulled"]) == ["processes[1].command", "processes[1].job.account"]
    row = ProcessRecord.objects.order_by("-window_start").first()
    assert row.command is None and row.user == "u" * 256 and row.job_account is None
    nulls = send_one(agent, gpu, kind="processes", uid=None, user=None, command=None, job=None,
                     memory_used_bytes_max=None, util_sm_avg=None)
    assert nulls["rejected"] == [] and nulls["nulled"] == []


def test_nul_characters_are_nulled_not_a_server_error(agent, gpu):
    body = send_one(agent, gpu, kind="processes", command="py\x00thon", user="al\tice\\")
    assert paths(body["nulled"]) == ["processes[1].command"]
    assert ProcessRecord.objects.filter(user="al\tice\\").exists()


def test_process_job_source_must_be_known_and_numbers_checked(agent, gpu):
    body = send_one(agent, gpu, kind="processes", job={"source": "lsf", "id": 77},
                    util_sm_avg=101.0, memory_used_bytes_max=-1)
    assert sorted(paths(body["nulled"])) == ["processes[1].job.source",
                                             "processes[1].memory_used_bytes_max",
                                             "processes[1].util_sm_avg"]
    row = ProcessRecord.objects.order_by("-window_start").first()
    assert row.job_source is None and row.job_id == "77" and row.util_sm_avg is None


def test_process_window_rules_apply(agent, gpu):
    body = send_one(agent, gpu, kind="processes", window_end="2020-01-01T00:00:00Z")
    assert paths(body["rejected"]) == ["processes[1].window_end"]


def test_events_rules(agent, gpu):
    now = timezone.now().replace(microsecond=0)
    events = [
        event(gpu, now),                                              # 0 stored
        event(gpu, now, xid=None),                                    # 1 xid required
        event(gpu, now, type_="gpu_lost"),                            # 2 stored, xid null
        event(None, now, type_="agent_restart"),                      # 3 node-level, stored
        event(gpu, now, type_="clock_skew"),                          # 4 gpu nulled
        event(None, now, type_="ecc_uncorrected"),                    # 5 needs a GPU
        event(gpu, now, type_="meltdown"),                            # 6 unknown type
        event(gpu, now, event_id="nope"),                             # 7 bad id
        event(gpu, now + timedelta(minutes=6)),                       # 8 ts too late
        event(gpu, now - timedelta(days=8, minutes=1)),               # 9 ts too old
        event(gpu, now, detail="d" * 257),                            # 10 detail nulled
        {**event(gpu, now), "ts": iso(now)[:-1] + ".7Z"},             # 11 truncated, stored
    ]
    body = agent.post(batch(gpus=[gpu_entry(gpu)], events=events)).json()
    assert paths(body["rejected"]) == ["events[1].xid", "events[5].gpu_uuid", "events[6].type",
                                       "events[7].event_id", "events[8].ts", "events[9].ts"]
    assert paths(body["nulled"]) == ["events[4].gpu_uuid", "events[10].detail"]
    assert body["events"]["stored"] == 6
    # accounting.md: sub-second input is truncated towards the past before it is stored.
    assert GpuEvent.objects.get(event_id=events[11]["event_id"]).ts == now
    assert GpuEvent.objects.filter(type="agent_restart", gpu__isnull=True).exists()
    assert GpuEvent.objects.filter(type="clock_skew", gpu__isnull=True).exists()


def test_long_node_strings_are_nulled(agent):
    body = batch()
    body["node"]["hostname"] = "h" * 257
    body["node"]["agent_version"] = "v" * 65
    response = agent.post(body).json()
    assert paths(response["nulled"]) == ["node.agent_version", "node.hostname"]


def test_bad_gpu_entry_is_rejected_not_the_batch(agent, gpu):
    body = agent.post(batch(gpus=[gpu_entry("GPU-bad"), gpu_entry(gpu, index=1)],
                            samples=[sample(gpu, recent_minute())])).json()
    assert paths(body["rejected"]) == ["gpus[0].uuid"]
    assert body["samples"]["stored"] == 1


def test_mig_without_known_parent_is_rejected(agent):
    mig = new_gpu_uuid("MIG")
    body = agent.post(batch(gpus=[gpu_entry(mig, parent=new_gpu_uuid())],
                            samples=[sample(mig, recent_minute())])).json()
    assert paths(body["rejected"]) == ["gpus[0].mig_parent_uuid", "samples[0].gpu_uuid"]
