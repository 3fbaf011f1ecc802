"""Single sign-on's mail: the one place it asks the mail outbox for a message."""

from collections.abc import Iterable

from accounts.models import User
from gpuquota.mail.outbox import mail_send_later


def sso_mail(*, template: str, recipients: Iterable[User], context: dict, key: str) -> None:
    """Queue `template` to `recipients` in the current transaction (rolled back with it,
    sent after it commits), at most once per recipient and `key`."""
    mail_send_later(template=template, recipients=recipients, context=context, key=key)
