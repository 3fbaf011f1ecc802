from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from accounts.permissions import require_admin
from gpuquota.reliability.pages import reliability_page


@login_required
def fleet_reliability(request):
    """The fleet reliability page (admins)."""
    require_admin(request.user)
    now = timezone.now().replace(microsecond=0)
    return render(request, "reliability/fleet.html",
                  reliability_page(as_of=now))
