"""Why a login through an identity provider or the directory did not happen."""

from gpuquota.core.errors import DomainError


class LoginRefused(DomainError):
    """A login refused with a message the person can act on; nothing was changed."""

    status_code = 403
    code = "login_refused"


class ProviderUnreachable(LoginRefused):
    """The provider does not answer: the login cannot start or finish now."""

    status_code = 503
    code = "provider_unreachable"
