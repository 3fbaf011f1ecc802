from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.services import api_token_create
from tests.factories import GpuClassFactory, NodeFactory, QuotaFactory, make_gpu


@pytest.fixture
def fleet(roles):
    """Four H100 GPUs on one node, a quota of 4 for the lead's team."""
    gpu_class = GpuClassFactory(name="H100-80GB")
    node = NodeFactory(hostname="h100-a")
    for index in range(4):
        make_gpu(node=node, gpu_class=gpu_class, index=index)
    QuotaFactory(team=roles.team, gpu_class=gpu_class, gpus=4)
    return gpu_class


def bearer_client(user) -> Client:
    """A test client using a personal API token issued by the service."""
    _token, key = api_token_create(user=user, name="test")
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


@pytest.fixture
def lead_api(roles, fleet):
    return bearer_client(roles.lead)


@pytest.fixture
def admin_api(roles, fleet):
    return bearer_client(roles.admin)


def soon(hours: int = 24):
    return timezone.now().replace(microsecond=0) + timedelta(hours=hours)
