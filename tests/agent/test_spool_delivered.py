"""A delivered batch stays in the spool's delivered/ folder for `keep_delivered_s` from its
delivery (for a server restored from an older dump), is never sent again, and goes after."""

import uuid

from agent.cli import load_options
from agent.spool import Spool


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _batch() -> dict:
    return {"batch_id": str(uuid.uuid4()), "samples": [{}], "processes": [], "events": []}


def test_a_delivered_batch_is_kept_from_its_delivery_then_dropped(tmp_path):
    clock = Clock(1_795_000_000.0)
    spool = Spool(tmp_path / "spool", clock=clock, keep_delivered_s=3600)
    spool.put(_batch())
    clock.t += 3 * 86400  # delivered three days after it was spooled (a long outage)
    [path] = spool.pending()
    spool.remove(path)
    assert spool.pending() == [] and [p.name for p in spool.delivered_dir.iterdir()] == [
        path.name]
    clock.t += 3000
    spool.put(_batch())  # the caps run at each put
    assert len(list(spool.delivered_dir.iterdir())) == 1
    clock.t += 700
    spool.put(_batch())
    assert list(spool.delivered_dir.iterdir()) == []


def test_without_keeping_a_delivered_batch_is_deleted(tmp_path):
    spool = Spool(tmp_path / "spool", keep_delivered_s=0)
    spool.put(_batch())
    spool.remove(spool.pending()[0])
    assert spool.pending() == [] and not spool.delivered_dir.exists()


def test_the_agent_keeps_delivered_batches_26_hours_by_default():
    options = load_options(["--server", "http://x", "--token-file", "t"], {})
    assert options["keep_delivered_hours"] == 26.0
    options = load_options(["--server", "http://x", "--token-file", "t"],
                           {"GPUQUOTA_AGENT_KEEP_DELIVERED_HOURS": "0"})
    assert options["keep_delivered_hours"] == 0.0
