"""A real agent process killed with SIGKILL while a batch is in flight, then restarted."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start_agent(server_url, token_file, spool_dir):
    return subprocess.Popen(
        [sys.executable, "-m", "agent", "--server", server_url, "--token-file", str(token_file),
         "--spool-dir", str(spool_dir), "--simulate", "3", "--seed", "5", "--hostname", "crashy",
         "--simulate-profiles", "training,inference,notebook", "--window", "1", "--poll", "0.5",
         "--send-jitter", "0", "--log-level", "WARNING"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for(condition, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_killed_mid_send_and_restarted_loses_nothing_and_doubles_nothing(
        tmp_path, protocol_server, token_file):
    spool_dir = tmp_path / "spool"
    protocol_server.hang_on_request = 2  # stored, but the agent never hears back
    first = start_agent(protocol_server.url, token_file, spool_dir)
    try:
        assert protocol_server.hung.wait(20)
        time.sleep(1.5)  # more windows close and wait in the spool behind the hung one
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    hung_id = protocol_server.requests[1][0]
    first_instance = {s["_instance"] for s in protocol_server.samples.values()}
    assert len(first_instance) == 1
    assert any(hung_id in p.name for p in spool_dir.glob("*.json"))  # still spooled

    second = start_agent(protocol_server.url, token_file, spool_dir)
    try:
        wait_for(lambda: len({s["_instance"] for s in protocol_server.samples.values()}) == 2)
        wait_for(lambda: not any(hung_id in p.name for p in spool_dir.glob("*.json")))
        time.sleep(1.2)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(20) == 0, second.stderr.read()

    # The batch in flight was sent again and answered as a replay: stored once.
    assert [status for bid, status in protocol_server.requests if bid == hung_id][1:] == [200]
    assert protocol_server.duplicates == 0
    # Nothing lost: the first instance's sequence has no gap up to its last spooled batch.
    by_instance = {}
    for sample in protocol_server.samples.values():
        by_instance.setdefault(sample["_instance"], []).append(sample["seq"])
    for seqs in by_instance.values():
        assert sorted(seqs) == list(range(1, len(seqs) + 1))
    assert len(by_instance[first_instance.pop()]) >= 3 * 3  # at least three windows of 3 GPUs
    # Nothing doubled: per GPU, no two stored samples overlap in time.
    per_gpu = {}
    for (gpu, start), sample in protocol_server.samples.items():
        per_gpu.setdefault(gpu, []).append((start, sample["window_end"]))
    for windows in per_gpu.values():
        windows.sort()
        assert all(a[1] <= b[0] for a, b in zip(windows, windows[1:], strict=False))
    assert list(spool_dir.glob("*.json")) == []
