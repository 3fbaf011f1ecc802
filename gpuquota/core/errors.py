"""Domain errors: raised by services, turned into one 4xx JSON format by the API
and into form errors by the UI."""


class DomainError(Exception):
    """A refusal a user can act on. `field` names the input at fault (or None)."""

    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if code:
            self.code = code


class NotFound(DomainError):
    status_code = 404
    code = "not_found"


class PermissionDenied(DomainError):
    status_code = 403
    code = "permission_denied"


class Conflict(DomainError):
    """The request is well formed but the state of the world refuses it (no capacity...)."""

    status_code = 409
    code = "conflict"
