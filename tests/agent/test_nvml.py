"""The NVML backend through the real `pynvml` wrappers, over a fake libnvidia-ml."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pynvml
import pytest

from agent.batch import gpu_record as batch_gpu_record
from agent.model import BackendUnavailable, GpuLost
from agent.nvml_backend import NvmlBackend
from agent.nvml_fake import CFunction, FakeGpu, FakeNvmlLib, installed
from agent.owners import OwnerResolver
from agent.runner import Agent
from agent.spool import Spool
from tests.agent.test_owners import make_process

ROOT = Path(__file__).resolve().parents[2]
UUIDS = [f"GPU-00000000-0000-4000-8000-{n:012d}" for n in range(4)]
MIG_UUIDS = [f"MIG-00000000-0000-4000-8000-{n:012d}" for n in range(2)]


@pytest.fixture
def gpus():
    return [
        FakeGpu(UUIDS[0], processes=[(4242, 2 * 2**30)], memory_used=3 * 2**30),
        FakeGpu(UUIDS[1], name="NVIDIA A100-SXM4-40GB", pci_bus_id="00000000:4C:00.0",
                memory_total=42505273344, power_limit_mw=400000),
        FakeGpu(UUIDS[2], name="NVIDIA H100 80GB HBM3", mig=[
            FakeGpu(MIG_UUIDS[0], name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", processes=[(77, 2**30)],
                    unsupported={"nvmlDeviceGetUtilizationRates", "nvmlDeviceGetSamples",
                                 "nvmlDeviceGetPowerUsage", "nvmlDeviceGetProcessUtilization"}),
            FakeGpu(MIG_UUIDS[1], name="NVIDIA H100 80GB HBM3 MIG 3g.40gb")]),
    ]


@pytest.fixture
def nvml(gpus):
    with installed(FakeNvmlLib(gpus)) as lib:
        backend = NvmlBackend(event_wait_ms=20)
        yield lib, backend
        backend.close()


def by_uuid(backend):
    return {g.uuid: g for g in backend.discover()}


def test_inventory_lists_gpus_and_mig_devices_under_their_parent(nvml):
    _, backend = nvml
    found = backend.discover()
    assert [g.uuid for g in found] == [UUIDS[0], UUIDS[1], UUIDS[2], *MIG_UUIDS]
    a100 = found[1]
    assert (a100.name, a100.pci_bus_id, a100.memory_total_bytes, a100.power_limit_w) == (
        "NVIDIA A100-SXM4-40GB", "00000000:4C:00.0", 42505273344, 400.0)
    assert [g.mig_parent_uuid for g in found] == [None, None, None, UUIDS[2], UUIDS[2]]
    assert backend.driver_version() == "580.65.06"


def test_the_board_serial_and_part_number_are_read_for_gpus_not_mig_devices(nvml):
    lib, backend = nvml
    lib.gpus[1].serial, lib.gpus[1].board_part_number = " 1321021034567 ", "699-2G193-0200-100"
    found = by_uuid(backend)
    assert (found[UUIDS[1]].serial, found[UUIDS[1]].board_part_number) == (
        "1321021034567", "699-2G193-0200-100")
    assert found[UUIDS[0]].serial == "1654923012345"
    assert [found[m].serial for m in MIG_UUIDS] == [None, None]
    assert batch_gpu_record(found[UUIDS[1]])["serial"] == "1321021034567"
    assert "serial" not in batch_gpu_record(found[MIG_UUIDS[0]])


@pytest.mark.parametrize("answer", ["[N/A]", "N/A", "", "   ", None, b"\xff\xfe"])
def test_a_board_without_a_serial_is_inventoried_without_one(answer):
    """Consumer boards print "[N/A]" (or nothing); some drivers answer NOT_SUPPORTED; a
    string that is not UTF-8 is no serial either: the GPU is inventoried all the same."""
    gpu = FakeGpu(UUIDS[0], name="NVIDIA GeForce RTX 4090", board_part_number="[N/A]")
    if answer is None:
        gpu.unsupported = {"nvmlDeviceGetSerial", "nvmlDeviceGetBoardPartNumber"}
    elif isinstance(answer, bytes):
        gpu.serial = answer.decode("latin-1")
    else:
        gpu.serial = answer
    with installed(FakeNvmlLib([gpu], missing=())) as lib:
        if isinstance(answer, bytes):  # the C library hands back raw bytes
            lib.nvmlDeviceGetSerial = CFunction(
                lambda h, buf, size: setattr(buf, "value", answer) or pynvml.NVML_SUCCESS)
        backend = NvmlBackend(event_wait_ms=20)
        try:
            [found] = backend.discover()
            reading = backend.read(found)
        finally:
            backend.close()
    assert (found.uuid, found.serial, found.board_part_number) == (UUIDS[0], None, None)
    assert reading.power_w is not None
    assert "serial" not in batch_gpu_record(found)


def test_an_old_driver_without_the_serial_entry_point_still_inventories():
    with installed(FakeNvmlLib([FakeGpu(UUIDS[0])],
                               missing=("nvmlDeviceGetSerial",))):
        backend = NvmlBackend(event_wait_ms=20)
        try:
            [found] = backend.discover()
        finally:
            backend.close()
    assert (found.serial, found.board_part_number) == (None, "692-2G520-0200-000")


def test_a_reading_carries_samples_counters_and_processes(nvml, gpus):
    _, backend = nvml
    gpus[0].advance(3, 90)
    gpus[0].ecc_corrected, gpus[0].clock_event_reasons, gpus[0].temp_c = 2, 4, 71
    gpu = by_uuid(backend)[UUIDS[0]]
    reading = backend.read(gpu)
    assert reading.util_gpu == [90, 90, 90]
    assert reading.memory_used_bytes == 3 * 2**30 and reading.power_w == 70.0
    assert reading.energy_mj == gpus[0].energy_mj and reading.ecc_corrected_total == 2
    assert (reading.temp_c, reading.clock_event_reasons, reading.remap_pending) == (71, 4, False)
    [proc] = reading.processes
    assert (proc.pid, proc.memory_used_bytes, proc.util_sm) == (4242, 2 * 2**30, [90, 90, 90])
    # The next poll sees only what is newer than the last sample seen.
    gpus[0].advance(1, 40)
    assert backend.read(gpu).util_gpu == [40]


def test_an_empty_sample_buffer_falls_back_to_the_instantaneous_reading(nvml):
    _, backend = nvml
    reading = backend.read(by_uuid(backend)[UUIDS[1]])  # nothing in the buffer (NOT_FOUND)
    assert reading.util_gpu == [0]  # an idle GPU reports 0, not null
    assert reading.processes == []  # the empty process list (NVML's size query says 0)


def test_not_supported_gives_null_and_is_not_asked_again(nvml, gpus):
    lib, backend = nvml
    gpus[1].unsupported |= {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEccErrors"}
    gpu = by_uuid(backend)[UUIDS[1]]
    first = backend.read(gpu)
    assert first.power_w is None and first.ecc_corrected_total is None
    assert first.memory_used_bytes == 0 and first.temp_c == 35  # the rest is read
    calls = lib.nvmlDeviceGetPowerUsage.calls
    backend.read(gpu)
    assert lib.nvmlDeviceGetPowerUsage.calls == calls


def test_old_drivers_without_versioned_calls_fall_back(gpus):
    missing = ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetTemperatureV")
    with installed(FakeNvmlLib(gpus, missing=missing)):
        backend = NvmlBackend(event_wait_ms=20)
        try:
            found = by_uuid(backend)
            reading = backend.read(found[UUIDS[0]])
        finally:
            backend.close()
    assert found[UUIDS[0]].memory_total_bytes == 85520809984
    assert reading.memory_used_bytes == 3 * 2**30 and reading.temp_c == 35


def test_mig_devices_report_memory_and_processes_and_null_utilization(nvml, gpus):
    _, backend = nvml
    found = by_uuid(backend)
    gpus[2].processes = [(77, 2**30)]  # NVML lists a MIG slice's processes on the parent too
    assert backend.read(found[UUIDS[2]]).processes == []  # read once, on the slice
    reading = backend.read(found[MIG_UUIDS[0]])
    assert reading.util_gpu is None and reading.util_mem is None and reading.power_w is None
    [proc] = reading.processes
    assert (proc.pid, proc.memory_used_bytes, proc.util_sm) == (77, 2**30, None)


def test_a_lost_gpu_raises_for_itself_only(nvml, gpus):
    _, backend = nvml
    found = by_uuid(backend)
    gpus[0].lost = True
    with pytest.raises(GpuLost):
        backend.read(found[UUIDS[0]])
    assert backend.read(found[UUIDS[1]]).temp_c == 35


def test_xid_events_arrive_through_the_event_thread(nvml):
    lib, backend = nvml
    backend.discover()
    lib.raise_event(UUIDS[1], pynvml.nvmlEventTypeXidCriticalError, 79)
    lib.raise_event(UUIDS[0], pynvml.nvmlEventTypeDoubleBitEccError, 0)
    deadline = time.monotonic() + 5
    events = []
    while len(events) < 2 and time.monotonic() < deadline:
        events += backend.drain_events()
        time.sleep(0.01)
    assert [(e.gpu_uuid, e.type, e.xid) for e in events] == [
        (UUIDS[1], "xid", 79), (UUIDS[0], "ecc_uncorrected", None)]
    assert events[0].detail == "GPU has fallen off the bus"


def make_agent(tmp_path, clock):
    return Agent(backend=NvmlBackend(event_wait_ms=20), spool=Spool(tmp_path / "spool"),
                 owners=OwnerResolver(str(tmp_path / "proc")), hostname="n1", boot_id="b",
                 window_s=60, clock=clock)


def test_the_agent_keeps_sampling_the_others_when_one_gpu_is_lost(tmp_path, clock, nvml, gpus):
    agent = make_agent(tmp_path, clock)
    agent.start()
    gpus[1].lost = True
    agent.poll()
    agent.poll()
    batch = agent.close_window(0, 60)
    lost = [e for e in batch["events"] if e["type"] == "gpu_lost"]
    assert [e["gpu_uuid"] for e in lost] == [UUIDS[1]]  # once, not at every poll
    sampled = {s["gpu_uuid"] for s in batch["samples"]}
    assert sampled == {UUIDS[0], UUIDS[2], *MIG_UUIDS}

    gpus[1].lost = False  # reset without a reboot: answered again at the next look
    clock.t += 30
    agent.poll()
    assert UUIDS[1] not in {s["gpu_uuid"] for s in agent.close_window(60, 120)["samples"]}
    clock.t += 31  # a minute after it was lost
    agent.poll()
    agent.poll()
    batch = agent.close_window(120, 180)
    back = next(s for s in batch["samples"] if s["gpu_uuid"] == UUIDS[1])
    assert back["readings"] == 2 and batch["events"] == []
    agent.backend.close()


def test_an_energy_counter_reset_nulls_the_window_and_is_reported(tmp_path, clock, nvml, gpus):
    agent = make_agent(tmp_path, clock)
    agent.start()
    gpus[0].energy_mj += 60_000
    agent.poll()
    gpus[0].energy_mj = 1_000
    agent.poll()
    batch = agent.close_window(0, 60)
    sample = next(s for s in batch["samples"] if s["gpu_uuid"] == UUIDS[0])
    assert sample["energy_j"] is None
    [reset] = [e for e in batch["events"] if e["type"] == "counter_reset"]
    assert reset["gpu_uuid"] == UUIDS[0] and "energy" in reset["detail"]
    other = next(s for s in batch["samples"] if s["gpu_uuid"] == UUIDS[1])
    assert other["energy_j"] == 0.0
    agent.backend.close()


def test_processes_get_their_owner_from_proc_and_one_remap_event(tmp_path, clock, nvml, gpus):
    make_process(tmp_path / "proc", 4242, uid=0, start=5555,
                 environ=b"SLURM_JOB_ID=77\0SLURM_JOB_ACCOUNT=physics\0")
    agent = make_agent(tmp_path, clock)
    agent.start()
    gpus[0].remap_pending = 1
    for util in (100, 50):
        gpus[0].advance(10, util)
        agent.poll()
    batch = agent.close_window(0, 60)
    [proc] = [p for p in batch["processes"] if p["gpu_uuid"] == UUIDS[0]]
    assert (proc["pid"], proc["pid_start"], proc["command"], proc["uid"]) == (
        4242, 5555, "python3", 0)
    assert proc["job"] == {"source": "slurm", "id": "77", "account": "physics"}
    assert proc["util_sm_avg"] == 75.0 and proc["memory_used_bytes_max"] == 2 * 2**30
    sample = next(s for s in batch["samples"] if s["gpu_uuid"] == UUIDS[0])
    assert (sample["util_gpu_avg"], sample["util_gpu_max"], sample["readings"]) == (75.0, 100, 2)
    assert [e["type"] for e in batch["events"]].count("remap_pending") == 1
    agent.backend.close()


def test_driver_not_loaded_is_a_clear_error(gpus):
    with installed(FakeNvmlLib(gpus, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)):
        with pytest.raises(BackendUnavailable, match="Driver Not Loaded"):
            NvmlBackend()


def test_while_nvml_is_not_ready_the_agent_says_so_once_and_starts_when_it_answers(
        tmp_path, clock, gpus):
    lib = FakeNvmlLib(gpus, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with installed(lib):
        agent = Agent(backend=None, connect=lambda: NvmlBackend(event_wait_ms=20), retry_s=120,
                      spool=Spool(tmp_path / "spool"), owners=OwnerResolver(str(tmp_path / "proc")),
                      hostname="n1", boot_id="b", window_s=60, clock=clock)
        agent.start()
        agent.poll()
        down = agent.close_window(0, 60)
        assert (down["samples"], down["gpus"]) == ([], [])  # a heartbeat: the node is alive
        assert [e["type"] for e in down["events"]] == ["nvml_unavailable", "agent_restart"]
        assert "Driver Not Loaded" in down["events"][0]["detail"]
        assert down["events"][0]["gpu_uuid"] is None

        lib.init_error = 0  # the driver is loaded now
        clock.t += 60
        agent.poll()  # before the next try: still down, and said only once
        assert agent.close_window(60, 120)["events"] == []
        clock.t += 61
        agent.poll()
        agent.poll()
        up = agent.close_window(120, 180)
        assert {s["gpu_uuid"] for s in up["samples"]} == {*UUIDS[:3], *MIG_UUIDS}
        assert len(up["gpus"]) == 5 and up["events"] == []
        assert up["node"]["driver_version"] == lib.driver_version
        agent.backend.close()


def test_without_a_driver_the_agent_says_so_in_one_line_and_exits(token_file):
    # This machine has no libnvidia-ml.so.1: real pynvml raises LibraryNotFound.
    result = subprocess.run(
        [sys.executable, "-m", "agent", "--server", "http://127.0.0.1:9",
         "--token-file", str(token_file), "--spool-dir", str(token_file.parent / "spool")],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "no NVIDIA driver" in result.stderr and "--simulate" in result.stderr
