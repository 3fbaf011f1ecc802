from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from accounts.permissions import can_act_for_team, team_for_view
from accounts.selectors import team_members
from gpuquota.reservations.selectors import quotas_current


@login_required
def team_detail(request, slug: str):
    team = team_for_view(request.user, slug)
    context = {
        "team": team,
        "can_act": can_act_for_team(request.user, team),
        "members": team_members(team=team),
        "quotas": quotas_current(team=team),
    }
    return render(request, "reservations/team_detail.html", context)
