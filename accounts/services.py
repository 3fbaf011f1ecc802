from django.db import transaction

from accounts.models import ApiToken, User
from gpuquota.core.services import audit_record
from gpuquota.core.tokens import token_generate


@transaction.atomic
def api_token_create(*, user: User, name: str) -> tuple[ApiToken, str]:
    """A new personal API token; the plain key is returned once and never stored."""
    new = token_generate("u")
    token = ApiToken.objects.create(user=user, name=name, prefix=new.prefix, key_hash=new.key_hash)
    audit_record(actor=user, action="api_token.create", obj=token, changes={"name": name})
    return token, new.key
