"""The product's own 404/500 pages, favicon and navigation by role."""

import pytest
from django.test import Client, RequestFactory
from django.views.defaults import server_error

from gpuquota.core.errorpages import ProductErrorPagesMiddleware

pytestmark = pytest.mark.django_db


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("debug", [True, False])
def test_unknown_pages_show_the_products_404_to_users(roles, settings, debug):
    settings.DEBUG = debug
    response = _client(roles.member).get("/no/such/page/")
    body = response.content.decode()
    assert response.status_code == 404
    assert "Page not found" in body and "gpuquota" in body
    assert "URLconf" not in body and "Traceback" not in body
    team_404 = _client(roles.outsider).get(f"/teams/{roles.team.slug}/")
    assert team_404.status_code == 404 and "Page not found" in team_404.content.decode()


def test_admins_keep_the_debug_404_in_the_embedded_default(roles, settings):
    settings.DEBUG = True
    assert "URLconf" in _client(roles.admin).get("/no/such/page/").content.decode()


def test_api_404_stays_json(roles, settings):
    settings.DEBUG = True
    response = _client(roles.member).get("/api/v1/reservations/999999")
    assert response.status_code == 404 and response["Content-Type"] == "application/json"


def test_500_page_is_the_products_and_errors_are_logged(roles, settings, caplog):
    settings.DEBUG = False
    body = server_error(RequestFactory().get("/")).content.decode()
    assert "Something went wrong" in body and "app.css" in body
    settings.DEBUG = True
    request = RequestFactory().get("/teams/x/")
    request.user = roles.member
    response = ProductErrorPagesMiddleware(lambda r: None).process_exception(
        request, RuntimeError("boom"))
    assert response.status_code == 500 and b"Something went wrong" in response.content
    assert "Internal Server Error" in caplog.text


def test_favicon(roles):
    response = Client().get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("favicon.svg")
    page = _client(roles.member).get("/", follow=True).content.decode()
    assert 'rel="icon"' in page


def _home(user) -> str:
    return _client(user).get("/", follow=True).content.decode()


def test_members_do_not_see_reserve_leads_do(roles):
    assert 'href="/reservations/new/"' not in _home(roles.member)
    assert 'href="/reservations/new/"' in _home(roles.lead)
    assert 'href="/reservations/new/"' in _home(roles.admin)
