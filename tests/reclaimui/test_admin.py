"""The Django admin lists recommendations and exemptions read-only: every change goes
through the services."""

import pytest

from tests.reclaimui.helpers import body_of, login

pytestmark = pytest.mark.django_db


def test_recommendations_and_exemptions_are_listed_read_only(client, roles, vision_rec):
    login(client, roles, "admin")
    listing = client.get("/admin/reclaim/recommendation/")
    assert listing.status_code == 200 and f"/admin/reclaim/recommendation/{vision_rec.pk}/" in \
        body_of(listing)
    page = client.get(f"/admin/reclaim/recommendation/{vision_rec.pk}/change/")
    assert page.status_code == 200 and 'type="submit"' not in body_of(page).split(
        'id="recommendation_form"')[-1].split("</form>")[0]
    assert client.get("/admin/reclaim/recommendation/add/").status_code == 403
    before = vision_rec.status
    assert client.post(f"/admin/reclaim/recommendation/{vision_rec.pk}/change/",
                       {"status": "dismissed"}).status_code == 403
    vision_rec.refresh_from_db()
    assert vision_rec.status == before
    assert client.get(f"/admin/reclaim/recommendation/{vision_rec.pk}/delete/"
                      ).status_code == 403
    assert client.get("/admin/reclaim/exemption/").status_code == 200
    assert client.get("/admin/reclaim/exemption/add/").status_code == 403
