"""The Django admin is usable by a platform admin and refuses to delete history."""

import pytest
from django.contrib import admin
from django.urls import reverse

from tests.factories import AdminFactory, MembershipFactory, UserFactory, make_gpu

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model", list(admin.site._registry), ids=lambda m: m._meta.label_lower)
def test_every_admin_changelist_opens(client, model):
    client.force_login(AdminFactory())
    make_gpu()
    MembershipFactory()
    info = (model._meta.app_label, model._meta.model_name)
    response = client.get(reverse(f"admin:{info[0]}_{info[1]}_changelist"), {"q": "x"})
    assert response.status_code == 200


def test_admin_refuses_to_delete_a_gpu_with_history(client):
    client.force_login(AdminFactory())
    gpu = make_gpu()
    url = reverse("admin:inventory_gpu_delete", args=[gpu.pk])
    page = client.get(url)
    assert b"protected" in page.content.lower()
    client.post(url, {"post": "yes"})
    gpu.refresh_from_db()


def test_non_staff_cannot_open_the_admin(client):
    client.force_login(UserFactory())
    response = client.get(reverse("admin:index"))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
