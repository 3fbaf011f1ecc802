"""The sampling loop on a fake clock: alignment, partial windows, stops, clock jumps."""

import threading

import pytest

from agent.owners import OwnerResolver
from agent.runner import Agent
from agent.simulator import Simulator
from agent.spool import Spool
from agent.windows import iso


def make_agent(tmp_path, clock, *, window_s=60, poll_s=10.0, count=2):
    sim = Simulator(count, seed=1, hostname="n1", profiles=("training", "idle"), clock=clock.now)
    return Agent(backend=sim, spool=Spool(tmp_path / "spool", clock=clock.now),
                 owners=OwnerResolver(str(tmp_path / "proc")), hostname="n1", boot_id="b",
                 window_s=window_s, poll_s=poll_s, clock=clock)


def run_until(agent, clock, instant):
    """Run the loop until the fake clock reaches `instant`, then stop it as SIGTERM would."""
    stop = threading.Event()
    wait = clock.wait

    def stopping_wait(seconds, event):
        if clock.now() + seconds > instant:
            clock.t += max(0.0, instant - clock.now())
            stop.set()
            return True
        return wait(seconds, event)

    clock.wait = stopping_wait
    agent.run(stop)
    return [agent.spool.load(p) for p in agent.spool.pending()]


def windows(batches):
    return [(b["samples"][0]["window_start"], b["samples"][0]["window_end"]) for b in batches]


def test_a_partial_first_window_then_aligned_windows_then_a_partial_last_one(tmp_path, clock):
    t0 = 1_795_910_400 + 125.4  # 00:02:05.4Z
    clock.t = t0
    agent = make_agent(tmp_path, clock)
    batches = run_until(agent, clock, t0 + 150)  # stopped at 00:04:35.4
    assert windows(batches) == [
        (iso(t0), "2026-11-29T00:03:00Z"),
        ("2026-11-29T00:03:00Z", "2026-11-29T00:04:00Z"),
        ("2026-11-29T00:04:00Z", "2026-11-29T00:04:35Z"),
    ]
    assert [b["samples"][0]["readings"] for b in batches] == [6, 6, 3]  # polls at :10, :20...
    seqs = [(b["seq_first"], b["seq_last"]) for b in batches]
    assert seqs == [(1, 2), (3, 4), (5, 6)]
    first = batches[0]
    assert [e["type"] for e in first["events"]] == ["agent_restart"]
    assert first["events"][0]["gpu_uuid"] is None
    assert first["node"]["boot_id"] == "b" and first["node"]["hostname"] == "n1"
    assert {b["agent_instance_id"] for b in batches} == {agent.instance_id}
    assert len({b["batch_id"] for b in batches}) == 3


def test_once_samples_exactly_one_window(tmp_path, clock):
    clock.t = 1_795_910_400 + 3
    agent = make_agent(tmp_path, clock, window_s=5, poll_s=1)
    agent.run(threading.Event(), once=True)
    [batch] = [agent.spool.load(p) for p in agent.spool.pending()]
    assert windows([batch]) == [("2026-11-29T00:00:03Z", "2026-11-29T00:00:05Z")]
    assert batch["samples"][0]["readings"] == 2


def test_a_wall_clock_jump_restarts_the_windows_and_is_reported(tmp_path, clock):
    t0 = 1_795_910_400.0
    clock.t = t0
    agent = make_agent(tmp_path, clock)
    original_wait = clock.wait

    def jumping_wait(seconds, stop):
        result = original_wait(seconds, stop)
        if clock.t >= t0 + 90 and not clock.offset:
            clock.offset = 3600.0  # NTP stepped the clock an hour forward
        return result

    clock.wait = jumping_wait
    batches = run_until(agent, clock, t0 + 3600 + 200)
    skews = [e for b in batches for e in b["events"] if e["type"] == "clock_skew"]
    assert len(skews) == 1 and "+3600" in skews[0]["detail"]
    # The window the jump fell into is dropped; a partial one restarts from the new time.
    assert windows(batches) == [
        ("2026-11-29T00:00:00Z", "2026-11-29T00:01:00Z"),
        ("2026-11-29T01:01:30Z", "2026-11-29T01:02:00Z"),
        ("2026-11-29T01:02:00Z", "2026-11-29T01:03:00Z"),
        ("2026-11-29T01:03:00Z", "2026-11-29T01:03:20Z"),
    ]


@pytest.mark.parametrize("window_s", [7, 900])
def test_windows_the_protocol_refuses_are_refused_at_start(tmp_path, clock, window_s):
    with pytest.raises(ValueError, match="divide 3600"):
        make_agent(tmp_path, clock, window_s=window_s)


def test_a_heartbeat_without_gpus_still_takes_a_sequence_number(tmp_path, clock):
    agent = make_agent(tmp_path, clock, count=0)
    agent.start()
    first = agent.close_window(0, 60)
    second = agent.close_window(60, 120)
    assert first["samples"] == [] and (first["seq_first"], first["seq_last"]) == (1, 1)
    assert (second["seq_first"], second["seq_last"]) == (2, 2)
