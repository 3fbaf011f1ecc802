"""The simulator: stable identities and the behaviours the demo relies on."""

import pytest

from agent.model import GpuLost
from agent.simulator import Simulator
from agent.validate import UUID_RE


class Clock:
    def __init__(self):
        self.t = 1_795_910_400.0

    def __call__(self):
        return self.t


def polls(sim, clock, gpu, count=30):
    readings = []
    for _ in range(count):
        clock.t += 10
        readings.append(sim.read(gpu))
    return readings


def test_uuids_depend_only_on_seed_hostname_and_index():
    def uuids(seed, host):
        return [g.uuid for g in Simulator(8, seed=seed, hostname=host).discover()]

    assert uuids(1, "gpu-01") == uuids(1, "gpu-01")  # a restarted node reports the same GPUs
    assert uuids(1, "gpu-01") != uuids(1, "gpu-02") and uuids(1, "gpu-01") != uuids(2, "gpu-01")
    assert all(UUID_RE.match(u) for u in uuids(1, "gpu-01"))


def test_eight_gpus_show_every_behaviour_and_a_mig_partitioned_one():
    gpus = Simulator(8, seed=1, hostname="h", models=("NVIDIA A100-SXM4-40GB",)).discover()
    parents = [g for g in gpus if g.mig_parent_uuid is None]
    migs = [g for g in gpus if g.mig_parent_uuid]
    assert len(parents) == 8 and len(migs) == 2
    assert {m.mig_parent_uuid for m in migs} == {parents[5].uuid}
    assert all(UUID_RE.match(m.uuid) and m.uuid.startswith("MIG-") for m in migs)
    assert parents[0].name == "NVIDIA A100-SXM4-40GB" and parents[0].power_limit_w == 400


def test_profiles_behave_as_their_names_say():
    clock = Clock()
    sim = Simulator(4, seed=3, hostname="h", clock=clock, users=("ann",), accounts=("astro",))
    training, inference, notebook, idle = sim.discover()

    def mean_util(gpu):
        values = [u for r in polls(sim, clock, gpu) for u in r.util_gpu]
        return sum(values) / len(values)

    assert 90 <= mean_util(training) <= 100
    assert 10 <= mean_util(inference) <= 80
    assert mean_util(notebook) == 0 and mean_util(idle) == 0
    held = sim.read(notebook)
    assert held.memory_used_bytes >= 20 * 2**30 and held.processes[0].owner.source == "unix"
    assert sim.read(idle).processes == []
    job = sim.read(training).processes[0].owner
    assert (job.source, job.user, job.account) == ("slurm", "ann", "astro")
    assert sim.read(inference).processes[0].owner.source == "kubernetes"


def test_the_xid79_gpu_is_lost_after_its_delay_with_one_xid_event():
    clock = Clock()
    sim = Simulator(5, seed=3, hostname="h", clock=clock, fail_after_s=60)
    doomed = sim.discover()[4]
    sim.read(doomed)
    clock.t += 61
    for _ in range(2):
        with pytest.raises(GpuLost):
            sim.read(doomed)
    [event] = sim.drain_events()
    assert (event.gpu_uuid, event.type, event.xid) == (doomed.uuid, "xid", 79)


def test_energy_grows_with_power_over_time():
    clock = Clock()
    sim = Simulator(1, seed=3, hostname="h", clock=clock)
    gpu = sim.discover()[0]
    first = sim.read(gpu)
    clock.t += 10
    second = sim.read(gpu)
    assert second.energy_mj - first.energy_mj == pytest.approx(second.power_w * 10_000, rel=0.01)


def test_unknown_models_are_refused_with_the_known_ones_listed():
    with pytest.raises(ValueError, match="NVIDIA L4"):
        Simulator(1, seed=1, hostname="h", models=("Tesla K80",))


def test_a_gpu_the_prolog_recorded_runs_that_slurm_job_until_the_epilog_removes_it(tmp_path):
    """The demo's dev Slurm cluster has fake GPUs: its real jobs show on the simulated ones
    from the prolog's records, with their job id, user and account; the borrowers file is
    not needed there."""
    from agent.model import Owner

    clock = Clock()
    sim = Simulator(2, seed=1, hostname="gqnode1", profiles=("idle", "idle"), clock=clock,
                    gpu_jobs_dir=str(tmp_path))
    gpus = sim.discover()
    (tmp_path / "gpu1").write_text("7001 daemon vision\n")
    idle, busy = polls(sim, clock, gpus[0], 3)[-1], polls(sim, clock, gpus[1], 3)[-1]
    assert idle.processes == [] and max(idle.util_gpu) == 0
    assert [p.owner for p in busy.processes] == [Owner(None, "daemon", "slurm", "7001",
                                                       "vision")]
    assert min(busy.util_gpu) > 50
    (tmp_path / "gpu1").unlink()  # the job ended
    assert polls(sim, clock, gpus[1], 1)[-1].processes == []
