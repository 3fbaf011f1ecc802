"""Beat tasks of the accounts app: the periodic check of provider accounts, and the
forgetting of claim shapes no recent login carried."""

from celery import shared_task
from django.utils import timezone

from accounts.sso import conf
from accounts.sso.services import sso_identities_check
from accounts.sso.shapes import claim_shapes_prune

BEAT_SCHEDULE = {
    "accounts-sso-identities-check": {"task": "accounts.sso_identities_check",
                                      "schedule": 3600.0},
    "accounts-sso-claim-shapes-prune": {"task": "accounts.sso_claim_shapes_prune",
                                        "schedule": 86400.0},
}


@shared_task(name="accounts.sso_identities_check", autoretry_for=(Exception,),
             retry_backoff=60, max_retries=3)
def sso_identities_check_task() -> int:
    """Disable the provider accounts no longer vouched for: their API tokens stop
    (idempotent)."""
    return sso_identities_check(directory_active=_directory_subjects_active())


@shared_task(name="accounts.sso_claim_shapes_prune", autoretry_for=(Exception,),
             retry_backoff=60, max_retries=3)
def sso_claim_shapes_prune_task() -> int:
    """Forget the claim paths and shapes no login carried lately (idempotent)."""
    return claim_shapes_prune(now=timezone.now())


def _directory_subjects_active() -> set[str] | None:
    """The directory's enabled subjects; None without a directory (the LDAP extra, which
    python-ldap needs, is imported only where one is configured)."""
    if conf.ldap_directory() is None:
        return None
    from accounts.sso.ldap import ldap_subjects_active

    return ldap_subjects_active()
