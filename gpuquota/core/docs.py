"""The API docs (Swagger UI, ReDoc) from pinned local static files
(drf-spectacular-sidecar), under a Content-Security-Policy that lets them load nothing
from outside this server: they work in air-gapped clusters, and ReDoc's "powered by"
logo from its CDN is not even requested."""

from functools import wraps

DOCS_CSP = ("default-src 'self'; img-src 'self' data: blob:; font-src 'self' data:; "
            "style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline' blob:; "
            "worker-src 'self' blob:; connect-src 'self'")


def same_origin_only(view):
    """Wrap a docs view so its page may load only from this server."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        response["Content-Security-Policy"] = DOCS_CSP
        return response

    return wrapped
