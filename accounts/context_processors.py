from accounts.permissions import is_admin, is_lead_anywhere
from accounts.selectors import teams_visible


def navigation(request) -> dict:
    """What the top navigation shows: the user's teams and whether admin links appear."""
    user = request.user
    if not user.is_authenticated:
        return {"nav_teams": [], "nav_is_admin": False, "nav_is_lead": False}
    return {"nav_teams": list(teams_visible(user=user)[:20]), "nav_is_admin": is_admin(user),
            "nav_is_lead": is_lead_anywhere(user)}
