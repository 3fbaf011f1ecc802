import zoneinfo

from django.utils import timezone


class UserTimezoneMiddleware:
    """Show and read times in the signed-in user's time zone (stored times stay UTC)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            timezone.activate(zoneinfo.ZoneInfo(user.timezone))
        else:
            timezone.deactivate()
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()
