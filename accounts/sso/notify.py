"""Single sign-on's mail, asked of the mail app by the name of its task: accounts sits
below mail (docs/development.md, "Layering") and never imports it."""

from collections.abc import Iterable

from accounts.models import User
from gpuquota.core.dispatch import task_enqueue_on_commit

#: gpuquota.mail.tasks: queues the message in the mail outbox, which sends it.
MAIL_TASK = "mail.queue"


def sso_mail(*, template: str, recipients: Iterable[User], context: dict, key: str) -> None:
    """Mail `template` to `recipients` once the current transaction commits (at most once
    per recipient and `key`); nothing when there is nobody to tell."""
    ids = sorted({user.pk for user in recipients})
    if ids:
        task_enqueue_on_commit(MAIL_TASK, template=template, recipient_ids=ids,
                               context=context, key=key)
