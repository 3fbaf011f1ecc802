from accounts.permissions import is_admin
from accounts.selectors import teams_visible


def navigation(request) -> dict:
    """What the top navigation shows: the user's teams and whether admin links appear."""
    user = request.user
    if not user.is_authenticated:
        return {"nav_teams": [], "nav_is_admin": False}
    return {"nav_teams": list(teams_visible(user=user)[:20]), "nav_is_admin": is_admin(user)}
