from accounts.permissions import is_admin, is_finance, is_lead_anywhere
from accounts.selectors import teams_visible

# Which menu entry a page belongs to, by path prefix (the first that matches): it is shown
# active. A new admin page adds its prefix here, next to its group in nav_apps.html.
NAV_SECTIONS = [
    ("/teams/", "teams"),
    ("/reservations/new/", "reserve"),
    ("/reservations/pending/", "approvals"),
    ("/reservations/maintenance/", "operations"),
    ("/reservations/backfill/", "manage"),
    ("/fleet/reliability/", "operations"),
    ("/fleet/", "fleet"),
    ("/statements/", "billing"),
    ("/manage/rate-cards/", "billing"),
    ("/ingest/", "operations"),
    ("/reclaim/", "operations"),
    ("/schedulers/", "operations"),
    ("/lending/", "operations"),
    ("/telemetry/", "operations"),
    ("/jobs/", "jobs"),
    ("/manage/jobs/", "operations"),
    ("/manage/", "manage"),
]


def nav_section(path: str) -> str:
    """The menu entry of the page at `path` ("" for none)."""
    return next((section for prefix, section in NAV_SECTIONS if path.startswith(prefix)), "")


def navigation(request) -> dict:
    """What the top navigation shows: the user's teams, whether lead and admin entries
    appear, and which entry is the current page's."""
    user = request.user
    if not user.is_authenticated:
        return {"nav_teams": [], "nav_is_admin": False, "nav_is_lead": False,
                "nav_is_finance": False}
    section = nav_section(request.path)
    team = request.path.split("/")[2] if section == "teams" else ""
    return {"nav_teams": list(teams_visible(user=user)[:20]), "nav_is_admin": is_admin(user),
            "nav_is_lead": is_lead_anywhere(user), "nav_is_finance": is_finance(user),
            "nav_section": section, "nav_team": team}
