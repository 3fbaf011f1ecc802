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
