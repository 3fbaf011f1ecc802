"""Login throttling (django-axes): per user and per client address, on the product's
login page and the admin's, with a clear message and a record in the Django admin."""

import pytest
from axes.models import AccessAttempt
from django.test import Client

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/?next=/admin/"


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AXES_FAILURE_LIMIT = 5


def fail(client, url: str, username: str, times: int) -> list[int]:
    return [client.post(url, {"username": username, "password": "wrong"}).status_code
            for _ in range(times)]


def test_five_wrong_passwords_lock_the_user_out_even_with_the_right_one(roles):
    client = Client()
    assert fail(client, LOGIN, "lead", 4) == [200] * 4  # the form again, with its error
    response = client.post(LOGIN, {"username": "lead", "password": "wrong"})
    assert response.status_code == 429
    response = client.post(LOGIN, {"username": "lead", "password": "password"})
    assert response.status_code == 429
    body = response.content.decode()
    assert "Too many failed logins" in body and "locked for 15 minutes" in body
    assert "_auth_user_id" not in client.session
    assert AccessAttempt.objects.filter(username="lead", failures_since_start__gte=5).exists()


def test_the_lockout_is_per_user_from_any_address(roles):
    fail(Client(REMOTE_ADDR="10.0.0.1"), LOGIN, "lead", 5)
    other_address = Client(REMOTE_ADDR="10.0.0.2")
    response = other_address.post(LOGIN, {"username": "lead", "password": "password"})
    assert response.status_code == 429


def test_the_lockout_is_per_address_for_any_user(roles):
    client = Client(REMOTE_ADDR="10.0.0.3")
    for name in ("a", "b", "c", "d", "e"):
        fail(client, LOGIN, f"nobody-{name}", 1)
    response = client.post(LOGIN, {"username": "member", "password": "password"})
    assert response.status_code == 429
    elsewhere = Client(REMOTE_ADDR="10.0.0.4")
    response = elsewhere.post(LOGIN, {"username": "member", "password": "password"})
    assert response.status_code == 302  # the user is not locked, only that address


def test_a_success_before_the_limit_resets_the_count(roles):
    client = Client()
    fail(client, LOGIN, "lead", 4)
    assert client.post(LOGIN, {"username": "lead", "password": "password"}).status_code == 302
    client.logout()
    assert fail(client, LOGIN, "lead", 4) == [200] * 4


def test_the_admin_login_is_throttled_with_the_message(roles):
    client = Client()
    fail(client, ADMIN_LOGIN, "admin", 5)
    response = client.post(ADMIN_LOGIN, {"username": "admin", "password": "password"})
    assert response.status_code == 429
    body = response.content.decode()
    assert "Too many failed logins" in body and "gpuquota administration" in body
    assert "_auth_user_id" not in client.session


def test_failed_logins_are_visible_to_admins_in_the_django_admin(roles):
    fail(Client(), LOGIN, "lead", 2)
    admin = Client()
    admin.force_login(roles.admin)
    body = admin.get("/admin/axes/accessattempt/").content.decode()
    assert "lead" in body and "127.0.0.1" in body
    assert admin.get("/admin/axes/accessfailurelog/").status_code == 200
