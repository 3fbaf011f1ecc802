"""Delivery against a live protocol server: spool, status codes, backoff, caps."""

import random

import pytest

from agent.owners import OwnerResolver
from agent.runner import Agent
from agent.sender import Sender, TokenError, TokenFile
from agent.simulator import Simulator
from agent.spool import Spool

WINDOW_S = 60


@pytest.fixture
def node(tmp_path, clock, protocol_server, token_file):
    """An agent over two simulated GPUs and its sender, on a fake clock."""
    spool = Spool(tmp_path / "spool", clock=clock.now)
    sim = Simulator(2, seed=7, hostname="n1", profiles=("training", "notebook"), clock=clock.now)
    agent = Agent(backend=sim, spool=spool, owners=OwnerResolver(str(tmp_path / "proc")),
                  hostname="n1", boot_id="boot-1", window_s=WINDOW_S, clock=clock)
    sender = Sender(spool=spool, server=protocol_server.url, token=TokenFile(token_file),
                    ca_file=None, clock=clock.now, node_status=agent.node_status,
                    rng=random.Random(3), timeout_s=5)
    clock.t = clock.t // WINDOW_S * WINDOW_S
    agent.start()
    return agent, sender, spool


def produce(agent, clock, windows):
    """Close `windows` full windows, polling at each window's end."""
    keys = []
    for _ in range(windows):
        start = int(clock.t)
        clock.t += WINDOW_S
        agent.poll()
        batch = agent.close_window(start, start + WINDOW_S)
        keys += [(s["gpu_uuid"], s["window_start"]) for s in batch["samples"]]
    return keys


class Waits:
    """The sender's sleeps, recorded; `then` runs after the Nth one."""

    def __init__(self, after=None, then=None):
        self.seconds, self.after, self.then = [], after, then

    def __call__(self, seconds):
        self.seconds.append(seconds)
        if len(self.seconds) == self.after:
            self.then()
        return len(self.seconds) > 50  # a runaway loop fails the test instead of hanging it


def test_server_down_for_a_while_then_up_every_record_arrives_once(node, clock, protocol_server):
    agent, sender, spool = node
    protocol_server.down = True
    keys = produce(agent, clock, 4)
    waits = Waits(after=5, then=lambda: setattr(protocol_server, "down", False))
    assert sender.drain(waits)
    assert sorted(protocol_server.samples) == sorted(keys)
    assert protocol_server.duplicates == 0 and spool.pending() == []
    # Full jitter: each wait lies between 0 and min(300, 2 * 2^attempt).
    assert all(0 <= s <= min(300, 2 * 2**n) for n, s in enumerate(waits.seconds))
    sent = [bid for bid, status in protocol_server.requests if status == 202]
    seqs = sorted(s["seq"] for s in protocol_server.samples.values())
    assert len(sent) == 4 and seqs == list(range(1, len(keys) + 1))  # oldest first, no gap


def test_an_answer_lost_after_storing_is_resent_and_stored_once(node, clock, protocol_server):
    agent, sender, _ = node
    keys = produce(agent, clock, 2)
    protocol_server.lose_answers = 1
    assert sender.drain(Waits())
    statuses = [status for _, status in protocol_server.requests]
    assert statuses[:2] == [202, 200]  # the replay of the same batch_id
    assert sorted(protocol_server.samples) == sorted(keys)


def test_a_400_goes_to_rejected_and_is_never_resent(node, clock, protocol_server):
    agent, sender, spool = node
    produce(agent, clock, 2)
    first = spool.load(spool.pending()[0])["batch_id"]
    protocol_server.refuse_batch_ids.add(first)
    assert sender.drain(Waits())
    assert [p.name.split("-", 1)[1] for p in spool.rejected_dir.iterdir()] == [f"{first}.json"]
    assert [status for _, status in protocol_server.requests] == [400, 202]


def test_a_401_keeps_spooling_until_the_token_file_is_rotated(node, clock, protocol_server,
                                                              token_file):
    agent, sender, spool = node
    protocol_server.tokens = {"token-b": "node-1"}  # the admin rotated the token

    def rotate():
        token_file.write_text("token-b\n")

    keys = produce(agent, clock, 2)
    waits = Waits(after=2, then=rotate)
    assert sender.drain(waits)
    assert waits.seconds[:2] >= [60, 60]  # retried slowly
    statuses = [status for _, status in protocol_server.requests]
    assert statuses == [401, 401, 202, 202]
    assert sorted(protocol_server.samples) == sorted(keys) and spool.pending() == []


def test_a_413_is_split_into_batches_with_new_ids(node, clock, protocol_server):
    agent, sender, spool = node
    keys = produce(agent, clock, 1)
    original = spool.load(spool.pending()[0])
    protocol_server.max_samples = 1
    assert sender.drain(Waits())
    ids = [bid for bid, _ in protocol_server.requests]
    assert ids[0] == original["batch_id"] and original["batch_id"] not in ids[1:]
    assert len(set(ids)) == len(ids)
    assert sorted(protocol_server.samples) == sorted(keys)
    assert len(protocol_server.processes) == len(original["processes"])
    assert len(protocol_server.events) == len(original["events"])


def test_a_split_keeps_each_sample_with_its_process_records():
    from agent.batch import split_batch

    def window(gpu, start, pids):
        sample = {"gpu_uuid": gpu, "window_start": start, "seq": start}
        return sample, [{"gpu_uuid": gpu, "window_start": start, "pid": pid} for pid in pids]

    windows = [window(gpu, start, range(n)) for gpu, start, n in
               (("GPU-a", 0, 3), ("GPU-b", 0, 0), ("GPU-a", 60, 1), ("GPU-b", 60, 4))]
    batch = {"batch_id": "b", "seq_first": 0, "samples": [w[0] for w in windows],
             "processes": [p for w in windows for p in w[1]], "events": [{"event_id": "e"}]}
    halves = split_batch(batch)
    for part in halves:
        windows_sent = {(s["gpu_uuid"], s["window_start"]) for s in part["samples"]}
        assert {(p["gpu_uuid"], p["window_start"]) for p in part["processes"]} <= windows_sent
    assert [len(part["samples"]) + len(part["processes"]) + len(part["events"])
            for part in halves] == [7, 6]  # cut between windows, nearest the middle
    assert sum(len(part["processes"]) for part in halves) == 8
    lone = {"batch_id": "c", "seq_first": 0, "samples": batch["samples"][:1],
            "processes": batch["processes"][:3], "events": []}
    assert [len(p["samples"]) + len(p["processes"]) for p in split_batch(lone)] == [2, 2]


@pytest.mark.parametrize(("status", "headers", "least"), [
    (503, {"Retry-After": "120"}, 120),
    (429, {"Retry-After": "7"}, 7),
    (422, {}, 60),
    (500, {}, 0),
])
def test_deferring_answers_keep_the_batch_and_wait(node, clock, protocol_server, status, headers,
                                                   least):
    agent, sender, spool = node
    produce(agent, clock, 1)
    protocol_server.forced = [(status, headers)]
    waits = Waits()
    assert sender.drain(waits)
    assert waits.seconds[0] >= least and len(waits.seconds) == 1
    assert spool.pending() == [] and len(protocol_server.samples) == 2


def test_the_spool_cap_drops_the_oldest_and_reports_it(node, clock, protocol_server):
    agent, sender, spool = node
    produce(agent, clock, 1)
    size = spool.pending()[0].stat().st_size
    spool.max_bytes = int(size * 2.5)
    produce(agent, clock, 3)
    assert len(spool.pending()) == 2
    assert agent.dropped_records_total > 0
    batch = produce_batch(agent, clock)
    [dropped] = [e for e in batch["events"] if e["type"] == "data_dropped"]
    assert dropped["gpu_uuid"] is None and "samples" in dropped["detail"]
    assert sender.drain(Waits())
    sent = [s for s in protocol_server.samples.values()]
    assert {s["_instance"] for s in sent} == {agent.instance_id}


def produce_batch(agent, clock):
    start = int(clock.t)
    clock.t += WINDOW_S
    agent.poll()
    return agent.close_window(start, start + WINDOW_S)


def test_the_spool_age_cap_drops_batches_older_than_the_limit(node, clock):
    agent, _, spool = node
    spool.max_age_s = 3 * WINDOW_S
    produce(agent, clock, 6)
    assert len(spool.pending()) == 4  # the last three windows and the one just written


def test_large_batches_are_gzipped(tmp_path, clock, protocol_server, token_file):
    spool = Spool(tmp_path / "spool", clock=clock.now)
    agent = Agent(backend=Simulator(64, seed=1, hostname="big", clock=clock.now), spool=spool,
                  owners=OwnerResolver(str(tmp_path / "proc")), hostname="big", boot_id=None,
                  window_s=WINDOW_S, clock=clock)
    sender = Sender(spool=spool, server=protocol_server.url, token=TokenFile(token_file),
                    ca_file=None, clock=clock.now, node_status=agent.node_status)
    agent.start()
    keys = produce(agent, clock, 1)
    assert sender.drain(Waits())
    assert protocol_server.encodings == ["gzip"] and len(protocol_server.samples) == len(keys)


def test_tls_is_verified_against_the_given_ca_file(node, clock, tls_server, tls_files,
                                                   token_file):
    agent, _, spool = node
    keys = produce(agent, clock, 1)

    def sender(ca_file):
        return Sender(spool=spool, server=tls_server.url, token=TokenFile(token_file),
                      ca_file=ca_file, clock=clock.now, node_status=agent.node_status)

    assert not sender(None).drain(Waits(), retry=False)  # an unknown CA is never trusted
    assert tls_server.requests == [] and len(spool.pending()) == 1
    assert sender(str(tls_files[0])).drain(Waits())
    assert sorted(tls_server.samples) == sorted(keys)


def test_a_token_file_others_can_read_is_refused(token_file):
    token_file.chmod(0o644)
    with pytest.raises(TokenError, match="chmod 600"):
        TokenFile(token_file).read()
