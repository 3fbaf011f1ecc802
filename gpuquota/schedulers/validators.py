"""A scheduler's REST endpoint: http(s), a host and a port, as sites name them."""

from urllib.parse import urlsplit

from django.core.exceptions import ValidationError


def endpoint_url_validate(value: str) -> None:
    """`http(s)://host[:port][/path]`; unlike Django's URL check, a bare host name
    (`http://slurmctl:6820`, as clusters name their controllers) is fine. Credentials in the
    URL are refused: they would show in logs and pages (the token field keeps them)."""
    if not value:
        return
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValidationError(f"Not a URL: {exc}.", code="invalid") from exc
    if parts.scheme not in ("http", "https"):
        raise ValidationError("Must start with http:// or https://.", code="invalid")
    if not parts.hostname or any(c.isspace() for c in value):
        raise ValidationError("Must name a host, e.g. http://slurmctl:6820.", code="invalid")
    if parts.username or parts.password:
        raise ValidationError("No credentials in the URL: put the token in the token field.",
                              code="invalid")
    if parts.query or parts.fragment:
        raise ValidationError("No query or fragment: the endpoint's base URL only.",
                              code="invalid")
    if port == 0:
        raise ValidationError("Port 0 is not a port.", code="invalid")
