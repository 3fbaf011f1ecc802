"""A first login through a provider whose vouched email is already a gpuquota user's: it is
held as a link request that a platform admin confirms (the provider account becomes that
user's) or refuses; never a silent second account."""

from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from accounts.models import ExternalIdentity, IdentityLinkRequest, User
from accounts.selectors import platform_admins
from accounts.sso.errors import LoginRefused
from accounts.sso.notify import sso_mail
from gpuquota.core.errors import Conflict, DomainError
from gpuquota.core.services import audit_record

Status = IdentityLinkRequest.Status


def link_candidates(*, email: str) -> QuerySet[User]:
    """The users whose email is `email` (case aside): whom a request may be linked to."""
    return User.objects.filter(email__iexact=email).order_by("username")


def link_requests_open() -> QuerySet[IdentityLinkRequest]:
    """Requests not linked yet (waiting, or refused and still linkable), newest first."""
    return IdentityLinkRequest.objects.exclude(status=Status.LINKED).select_related(
        "decided_by")


def _masked(email: str) -> str:
    name, _, domain = email.partition("@")
    return f"{name[:1]}…@{domain}"


def link_request_hold(*, source: str, provider: str, issuer: str, subject: str, email: str,
                      username: str, claims: dict, now: datetime) -> None:
    """Nothing when no user has `email`; else record (or refresh) the request, tell the
    admins the first time, and raise LoginRefused saying what happens next."""
    if not link_candidates(email=email).exists():  # no longer anyone's: nothing to hold
        IdentityLinkRequest.objects.filter(issuer=issuer, subject=subject).exclude(
            status=Status.LINKED).delete()
        return
    with transaction.atomic():
        request, created = IdentityLinkRequest.objects.select_for_update().get_or_create(
            issuer=issuer, subject=subject, defaults={
                "source": source, "provider": provider, "email": email, "username": username,
                "claims": claims, "requested_at": now, "last_attempt_at": now})
        if not created and request.status == Status.LINKED:  # its identity was removed since
            request.status, request.user, request.requested_at = Status.PENDING, None, now
            created = True
        request.email, request.username, request.claims = email, username, claims
        request.last_attempt_at = now
        request.save()
        if created:
            audit_record(actor=None, action="sso.link_request", obj=request,
                         changes={"provider": provider, "subject": subject, "email": email})
            sso_mail(template="sso_link_request", recipients=platform_admins(),
                     context={"provider": provider, "email": email, "username": username},
                     key=f"sso-link-request:{request.pk}:{now.isoformat()}")
    if request.status == Status.REFUSED:
        raise LoginRefused("An account with your email address already exists in gpuquota, "
                           "and an admin declined to make this login that account's. Ask an "
                           "admin.", field="email")
    raise LoginRefused(f"An account with your email address ({_masked(email)}) already "
                       "exists in gpuquota. So that nobody gets a second account by mistake, "
                       "a platform admin must confirm that this login is that account's; "
                       "they have been asked. Log in again once they have.", field="email")


@transaction.atomic
def link_request_confirm(*, request: IdentityLinkRequest, user: User,
                         actor: User) -> ExternalIdentity:
    """Make the request's provider account `user`'s (one of the users with its email);
    audited. Its next login through the provider is `user`'s, by the mapping rules."""
    request = IdentityLinkRequest.objects.select_for_update().get(pk=request.pk)
    if request.status == Status.LINKED:
        raise Conflict("This login is linked already.")
    if not link_candidates(email=request.email).filter(pk=user.pk).exists():
        raise DomainError(f"{user.username} does not have the address {request.email}.",
                          field="user")
    if ExternalIdentity.objects.filter(issuer=request.issuer, subject=request.subject).exists():
        raise Conflict("This provider account belongs to a user already.")
    now = timezone.now()
    identity = ExternalIdentity.objects.create(
        user=user, source=request.source, provider=request.provider, issuer=request.issuer,
        subject=request.subject, first_login_at=request.requested_at,
        last_login_at=request.last_attempt_at, last_claims=request.claims)
    request.status, request.user = Status.LINKED, user
    request.decided_by, request.decided_at = actor, now
    request.save()
    audit_record(actor=actor, action="sso.link_confirm", obj=user,
                 changes={"provider": request.provider, "subject": request.subject,
                          "email": request.email})
    return identity


@transaction.atomic
def link_request_refuse(*, request: IdentityLinkRequest, actor: User) -> IdentityLinkRequest:
    """Refuse the link: the provider account's logins stay refused, saying so; audited.
    An admin may still link it later."""
    request = IdentityLinkRequest.objects.select_for_update().get(pk=request.pk)
    if request.status == Status.LINKED:
        raise Conflict("This login is linked already.")
    request.status, request.decided_by, request.decided_at = Status.REFUSED, actor, timezone.now()
    request.save()
    audit_record(actor=actor, action="sso.link_refuse", obj=request,
                 changes={"provider": request.provider, "subject": request.subject,
                          "email": request.email})
    return request
