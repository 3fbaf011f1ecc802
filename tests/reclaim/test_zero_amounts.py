"""An amount of zero is still an amount: the fleet page's reclaim figures say 0.00 in the
currency of the rates when nothing is reclaimable or saved, not a bare 0.00."""

from datetime import UTC, datetime

import pytest
import time_machine
from django.test import Client

from reclaim.selectors import reclaim_figures
from tests.factories import AdminFactory, RateCardFactory

pytestmark = pytest.mark.django_db


@time_machine.travel(datetime(2027, 6, 2, 12, 0, tzinfo=UTC), tick=False)
def test_zero_savings_keep_the_currency():
    RateCardFactory(currency="EUR")
    figures = reclaim_figures()
    assert (figures.reclaimable_savings, figures.saved, figures.currency) == (0, 0, "EUR")
    client = Client()
    client.force_login(AdminFactory())
    page = client.get("/fleet/").content.decode()
    assert page.count('0.00 <small class="muted">EUR</small>') == 2
