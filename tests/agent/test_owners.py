"""Owner detection from /proc trees built in a temporary folder."""

import pytest

from agent.model import Owner
from agent.owners import OwnerResolver

POD_UID = "3c1f7d2a-5b6e-4f80-9a1b-2c3d4e5f6a7b"
CONTAINER = "0123456789abcdef" * 4


def make_process(proc, pid, *, uid=1012, cmdline=b"/usr/bin/python3\0train.py\0--lr\0",
                 comm="python3", environ=b"", cgroup="0::/user.slice/user-1012.slice\n",
                 start=912345678):
    base = proc / str(pid)
    base.mkdir(parents=True)
    # The program name may hold spaces and parentheses; stat must be split after the last ')'.
    (base / "stat").write_text(f"{pid} (my (odd) prog) S 1 {pid} {pid} 0 -1 4194560 " +
                               " ".join(["0"] * 12) + f" {start} 123 456\n")
    (base / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (base / "cmdline").write_bytes(cmdline)
    (base / "comm").write_text(comm + "\n")
    (base / "environ").write_bytes(environ)
    (base / "cgroup").write_text(cgroup)
    return base


@pytest.fixture
def resolver(tmp_path):
    users = {1012: "alice", 0: "root"}
    return OwnerResolver(str(tmp_path / "proc"), str(tmp_path / "pods"), users.get)


def lookup(resolver, pid):
    return resolver.lookup(pid, resolver.pid_start(pid))


def test_pid_start_comes_from_stat_field_22(tmp_path, resolver):
    make_process(tmp_path / "proc", 42, start=777)
    assert resolver.pid_start(42) == 777
    assert resolver.pid_start(43) is None  # gone


def test_slurm_job_and_account_from_the_environment(tmp_path, resolver):
    env = b"PATH=/bin\0SLURM_JOB_ID=123456\0SLURM_JOB_ACCOUNT=physics\0AWS_SECRET=hunter2\0"
    make_process(tmp_path / "proc", 42, environ=env,
                 cgroup="0::/system.slice/slurmstepd.scope/job_123456/step_0/user/task_0\n")
    command, owner = lookup(resolver, 42)
    assert command == "python3"  # the program name, never its arguments
    assert owner == Owner(1012, "alice", "slurm", "123456", "physics")


@pytest.mark.parametrize("cgroup", [
    "4:memory:/slurm/uid_1012/job_998/step_batch\n",
    "0::/system.slice/slurmstepd.scope/job_998/step_0/user/task_0\n",
])
def test_slurm_job_from_the_cgroup_when_the_environment_is_unreadable(tmp_path, resolver, cgroup):
    base = make_process(tmp_path / "proc", 42, cgroup=cgroup)
    (base / "environ").unlink()
    assert lookup(resolver, 42)[1] == Owner(1012, "alice", "slurm", "998", None)


def test_kubernetes_pod_from_cgroup_v1_with_namespace_from_the_kubelet(tmp_path, resolver):
    cgroup = (f"12:pids:/kubepods/burstable/pod{POD_UID}/{CONTAINER}\n"
              f"11:memory:/kubepods/burstable/pod{POD_UID}/{CONTAINER}\n")
    make_process(tmp_path / "proc", 42, uid=0, environ=b"HOSTNAME=trainer-7f9c-x2z\0",
                 cgroup=cgroup)
    volume = tmp_path / "pods" / POD_UID / "volumes/kubernetes.io~projected/kube-api-access-x1"
    volume.mkdir(parents=True)
    (volume / "namespace").write_text("vision")
    assert lookup(resolver, 42)[1] == Owner(0, "root", "kubernetes", "trainer-7f9c-x2z", "vision")


def test_kubernetes_pod_from_cgroup_v2_systemd_slices(tmp_path, resolver):
    underscored = POD_UID.replace("-", "_")
    cgroup = (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
              f"{underscored}.slice/cri-containerd-{CONTAINER}.scope\n")
    make_process(tmp_path / "proc", 42, uid=1012, environ=b"POD_NAMESPACE=nlp\0", cgroup=cgroup)
    assert lookup(resolver, 42)[1] == Owner(1012, "alice", "kubernetes", POD_UID, "nlp")


@pytest.mark.parametrize("cgroup", [
    f"0::/system.slice/docker-{CONTAINER}.scope\n",
    f"9:cpuset:/docker/{CONTAINER}\n",
])
def test_docker_container_from_cgroup_v1_and_v2(tmp_path, resolver, cgroup):
    make_process(tmp_path / "proc", 42, cgroup=cgroup)
    assert lookup(resolver, 42)[1] == Owner(1012, "alice", "docker", CONTAINER[:12])


def test_a_plain_process_belongs_to_its_unix_user(tmp_path, resolver):
    make_process(tmp_path / "proc", 42, uid=5555)
    assert lookup(resolver, 42)[1] == Owner(5555, None, "unix")  # a uid this host cannot name


def test_a_retitled_process_never_leaks_its_arguments(tmp_path, resolver):
    make_process(tmp_path / "proc", 42, cmdline=b"python: worker --token=s3cret\0")
    assert lookup(resolver, 42)[0] == "python:"


def test_comm_is_the_fallback_when_cmdline_is_empty(tmp_path, resolver):
    make_process(tmp_path / "proc", 42, cmdline=b"", comm="kworker")
    assert lookup(resolver, 42)[0] == "kworker"


def test_owners_are_cached_per_process_lifetime_and_forgotten_after_it(tmp_path, resolver):
    base = make_process(tmp_path / "proc", 42, environ=b"SLURM_JOB_ID=1\0")
    assert lookup(resolver, 42)[1].job_id == "1"
    (base / "environ").write_bytes(b"SLURM_JOB_ID=2\0")
    assert lookup(resolver, 42)[1].job_id == "1"  # same (pid, pid_start): same process
    # The same pid started again later is another process: looked up afresh.
    assert resolver.lookup(42, 912345679)[1].job_id == "2"
    resolver.forget_except(set())
    assert resolver.lookup(42, 912345678)[1].job_id == "2"


def _prolog_record(directory, index, text, *, written):
    import os

    directory.mkdir(exist_ok=True)
    record = directory / f"gpu{index}"
    record.write_text(text)
    os.utime(record, (written, written))


@pytest.fixture
def prolog_resolver(tmp_path):
    """A resolver reading the prolog's records; the host booted at 1,800,000,000 and its
    clock ticks 100 times a second, so a process started at tick 50,000 started at
    1,800,000,500."""
    import os

    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "stat").write_text("cpu 1 2 3\nbtime 1800000000\n")
    assert os.sysconf("SC_CLK_TCK") == 100
    return OwnerResolver(str(tmp_path / "proc"), str(tmp_path / "pods"),
                         {1012: "alice", 1013: "bob"}.get, gpu_jobs_dir=str(tmp_path / "jobs"))


def test_the_prologs_record_names_the_job_of_a_process_that_shows_none(tmp_path, prolog_resolver):
    # proctrack/linuxproc, and an agent that may not read other users' environments: the
    # process alone says only its user. The prolog wrote the job's record before it started.
    base = make_process(tmp_path / "proc", 42, start=50_000)
    (base / "environ").unlink()
    _prolog_record(tmp_path / "jobs", 2, "7001 alice vision\n", written=1_800_000_490)
    assert prolog_resolver.lookup(42, 50_000, 2)[1] == Owner(1012, "alice", "slurm", "7001",
                                                             "vision")
    # Another GPU has no record: the process stays a plain unix one.
    make_process(tmp_path / "proc", 43, start=50_000)
    assert prolog_resolver.lookup(43, 50_000, 3)[1] == Owner(1012, "alice", "unix")


@pytest.mark.parametrize("record, written", [
    ("7001 bob speech\n", 1_800_000_490),  # another user's job
    ("7001 alice vision\n", 1_800_000_600),  # written after the process started: not its job
    ("garbage\n", 1_800_000_490),
])
def test_a_record_that_cannot_be_the_processes_job_is_ignored(tmp_path, prolog_resolver,
                                                              record, written):
    make_process(tmp_path / "proc", 42, start=50_000)
    _prolog_record(tmp_path / "jobs", 0, record, written=written)
    assert prolog_resolver.lookup(42, 50_000, 0)[1] == Owner(1012, "alice", "unix")


def test_a_job_the_process_shows_itself_wins_over_the_record(tmp_path, prolog_resolver):
    make_process(tmp_path / "proc", 42, start=50_000,
                 environ=b"SLURM_JOB_ID=8002\0SLURM_JOB_ACCOUNT=vision\0")
    _prolog_record(tmp_path / "jobs", 0, "7001 alice vision\n", written=1_800_000_490)
    assert prolog_resolver.lookup(42, 50_000, 0)[1].job_id == "8002"
