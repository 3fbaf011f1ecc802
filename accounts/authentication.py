from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from rest_framework import authentication, exceptions

from accounts.services import api_token_use


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gqu_...`: a user's personal API token."""

    keyword = "Bearer"
    prefix = "gqu_"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if len(header) != 2 or header[0] != self.keyword or not header[1].startswith(self.prefix):
            return None
        token = api_token_use(key=header[1])
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown, expired or revoked API token.")
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


def token_or_login_required(view):
    """For pages that scripts fetch as well as people (a statement's CSV and PDF): an
    `Authorization: Bearer gqu_...` personal token signs the request in, as on the API; a
    bad one is a 401, never a redirect to the login page. Without one, as any page."""
    page = login_required(view)

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not authentication.get_authorization_header(request):
            return page(request, *args, **kwargs)
        try:
            found = ApiTokenAuthentication().authenticate(request)
        except exceptions.AuthenticationFailed as exc:
            return _unauthorized(str(exc.detail))
        if found is None:
            return _unauthorized("Expected `Authorization: Bearer gqu_...` (a personal API "
                                 "token, from your profile page).")
        request.user = found[0]
        return view(request, *args, **kwargs)

    return wrapped


def _unauthorized(message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=401, content_type="text/plain; charset=utf-8")
    response["WWW-Authenticate"] = ApiTokenAuthentication.keyword
    return response
