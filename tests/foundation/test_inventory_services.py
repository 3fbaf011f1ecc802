"""GPU classes from NVML model names, and what an admin's mapping changes."""

from datetime import timedelta

import pytest
from django.urls import reverse

from gpuquota.core.models import AuditEntry
from gpuquota.inventory.models import GpuClass, GpuModelMapping, gpu_uuid_normalize
from gpuquota.inventory.services import gpu_register, model_mapping_save
from tests.factories import EPOCH, AdminFactory, GpuClassFactory, NodeFactory, gpu_uuid

pytestmark = pytest.mark.django_db
MODEL = "NVIDIA B200"


def test_unmapped_model_gets_a_class_named_after_it_until_mapped():
    gpu = gpu_register(node=NodeFactory(), uuid=gpu_uuid(), model_name=MODEL, at=EPOCH)
    assert gpu.gpu_class.name == MODEL
    b200 = GpuClassFactory(name="B200-192GB")
    later = EPOCH + timedelta(days=10, minutes=30)
    model_mapping_save(
        mapping=GpuModelMapping(model_name=MODEL, gpu_class=b200), actor=AdminFactory(), at=later
    )
    gpu.refresh_from_db()
    assert gpu.gpu_class == b200
    history = list(
        gpu.class_history.order_by("valid_from").values_list(
            "gpu_class__name", "valid_from", "valid_until"
        )
    )
    assert history == [(MODEL, EPOCH, later), ("B200-192GB", later, None)]
    assert AuditEntry.objects.filter(action="gpu_model_mapping.save").exists()
    # New GPUs of that model now get the mapped class at once.
    other = gpu_register(node=NodeFactory(), uuid=gpu_uuid(), model_name=MODEL, at=later)
    assert other.gpu_class == b200


def test_mapping_from_the_admin_reclassifies(client):
    gpu = gpu_register(node=NodeFactory(), uuid=gpu_uuid(), model_name=MODEL, at=EPOCH)
    b200 = GpuClassFactory(name="B200-192GB")
    client.force_login(AdminFactory())
    response = client.post(
        reverse("admin:inventory_gpumodelmapping_add"),
        {"model_name": MODEL, "gpu_class": b200.pk},
    )
    assert response.status_code == 302
    gpu.refresh_from_db()
    assert gpu.gpu_class == b200
    assert GpuClass.objects.filter(name=MODEL).exists()  # history keeps the old class


@pytest.mark.parametrize(
    "raw,stored",
    [
        ("GPU-8932F937-D72C-4106-C12F-20BD9FAED9F6", "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6"),
        ("MIG-8932f937-d72c-4106-c12f-20bd9faed9f6", "MIG-8932f937-d72c-4106-c12f-20bd9faed9f6"),
    ],
)
def test_uuids_compare_case_insensitively(raw, stored):
    assert gpu_uuid_normalize(raw) == stored


@pytest.mark.parametrize("raw", ["GPU-1234", "gpu-8932f937-d72c-4106-c12f-20bd9faed9f6x", "", None])
def test_malformed_uuids_are_refused(raw):
    with pytest.raises(ValueError):
        gpu_uuid_normalize(raw)
