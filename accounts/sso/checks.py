"""Single sign-on switched on but not configured fails at start (`manage.py check`,
runserver, gunicorn's first request), not at someone's first login."""

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from accounts.sso import conf


def sso_settings_check(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    errors = []
    for read in (conf.oidc_providers, conf.ldap_directory, conf.token_reauth_days,
                 conf.oidc_timeout_s, conf.oidc_leeway_s, conf.claim_shapes_days):
        try:
            read()
        except (ImproperlyConfigured, ValueError, TypeError) as exc:
            errors.append(checks.Error(str(exc), id="accounts.E101",
                                       hint="See docs/sso.md and docs/configuration.md."))
    names = [provider.name for provider in _providers()]
    if len(names) != len(set(names)):
        errors.append(checks.Error(f"GPUQUOTA_OIDC_PROVIDERS names a provider twice: {names}",
                                   id="accounts.E102"))
    return errors


def _providers():
    try:
        return conf.oidc_providers()
    except ImproperlyConfigured:
        return []
