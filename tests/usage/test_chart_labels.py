"""The utilization page's per-class charts are small multiples: their axis labels must be
as readable as the big chart's, at 1366 px and on a phone (they were drawn at 720 units in
a 340 px card: 4 px text)."""

import pytest

from tests.factories import GpuClassFactory, RoleMatrix, make_gpu
from tests.helpers import browser_login, screenshot
from tests.usage.test_browser import demo_fleet

pytestmark = [pytest.mark.browser]

LABELS = """sel => [...document.querySelectorAll(sel + ' svg text')]
  .filter(t => /\\d/.test(t.textContent)).map(t => t.getBoundingClientRect().height)"""


@pytest.mark.parametrize("width", [1366, 390])
def test_the_per_class_charts_have_readable_axis_labels(transactional_db, browser_page, width):
    roles = RoleMatrix.create()
    demo_fleet(roles)
    make_gpu(gpu_class=GpuClassFactory(name="L4"))  # a second class: two small multiples
    page = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    browser_login(page, "admin")
    page.goto("/fleet/utilization/")
    assert page.locator(".class-charts .chart-card").count() == 2
    small = page.evaluate(LABELS, ".class-charts")
    assert small and min(small) >= 9, small  # px: as readable as body text's small print
    assert max(small) <= 16, small  # and not blown up either
    screenshot(page, f"usage-class-charts-{width}")
