"""The board serial (protocol 1's optional `gpus[].serial` and `board_part_number`): the agent
reads it through NVML, ingestion stores it on the GPU, an older agent's silence keeps it,
and a board without one ("[N/A]", consumer GPUs) is inventoried all the same."""

import pytest
from django.test import Client

from agent.batch import gpu_record
from agent.nvml_backend import NvmlBackend
from agent.nvml_fake import FakeGpu, FakeNvmlLib, installed
from gpuquota.inventory.models import Gpu
from tests.ingest.factories import Agent, batch, enrolled, gpu_entry, new_gpu_uuid

pytestmark = pytest.mark.django_db


def _inventoried(fakes: list[FakeGpu]) -> list[dict]:
    """The `gpus` entries the agent sends for `fakes`, read through the real pynvml."""
    with installed(FakeNvmlLib(fakes)):
        backend = NvmlBackend(event_wait_ms=20)
        try:
            return [gpu_record(g) for g in backend.discover()]
        finally:
            backend.close()


def test_the_serial_the_agent_reads_is_stored_on_the_gpu():
    uuids = [new_gpu_uuid() for _ in range(2)]
    mig = new_gpu_uuid("MIG")
    entries = _inventoried([
        FakeGpu(uuids[0], serial="1654923012345", mig=[FakeGpu(mig, serial="1654923012345")]),
        FakeGpu(uuids[1], name="NVIDIA GeForce RTX 4090", serial="[N/A]",
                board_part_number="[N/A]"),
    ])
    response = Agent(enrolled().key, Client()).post(batch(gpus=entries))
    assert response.status_code == 202, response.content
    assert response.json()["rejected"] == []
    stored = {g.uuid: (g.serial, g.board_part_number) for g in Gpu.objects.all()}
    assert stored == {uuids[0]: ("1654923012345", "692-2G520-0200-000"),
                      uuids[1]: ("", ""), mig: ("", "")}


def test_an_older_agent_keeps_the_serial_and_a_newer_one_fills_it():
    agent = Agent(enrolled().key, Client())
    gpu = new_gpu_uuid()
    agent.post(batch(gpus=[gpu_entry(gpu)]))  # protocol 1 as before: no serial field
    assert Gpu.objects.get(uuid=gpu).serial == ""
    agent.post(batch(gpus=[gpu_entry(gpu, serial=" 1321021034567\x00", board_part_number=None)]))
    assert Gpu.objects.get(uuid=gpu).serial == "1321021034567"
    agent.post(batch(gpus=[gpu_entry(gpu)]))
    agent.post(batch(gpus=[gpu_entry(gpu, serial="[N/A]")]))
    assert Gpu.objects.get(uuid=gpu).serial == "1321021034567"


def test_a_serial_that_is_not_text_is_a_400_naming_the_field():
    agent = Agent(enrolled().key, Client())
    gpu = new_gpu_uuid()
    response = agent.post(batch(gpus=[gpu_entry(gpu, serial=1654923012345)]))
    assert response.status_code == 400
    assert "gpus[0].serial" in response.content.decode()
    assert not Gpu.objects.filter(uuid=gpu).exists()
