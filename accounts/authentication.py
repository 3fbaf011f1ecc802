from django.utils import timezone
from rest_framework import authentication, exceptions

from accounts.models import ApiToken
from gpuquota.core.tokens import token_hash


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer gqu_...`: a user's personal API token."""

    keyword = "Bearer"
    prefix = "gqu_"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if len(header) != 2 or header[0] != self.keyword or not header[1].startswith(self.prefix):
            return None
        token = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=token_hash(header[1]), revoked_at__isnull=True)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Unknown or revoked API token.")
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword
