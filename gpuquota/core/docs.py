"""The API docs (Swagger UI, ReDoc) from pinned local static files
(drf-spectacular-sidecar), under the site's Content-Security-Policy
(settings.CONTENT_SECURITY_POLICY), widened only for what they need from this server:
`data:` images (Swagger UI's icons) and a `blob:` worker (ReDoc's search). They load
nothing from outside this server, so they work in air-gapped clusters, and run no inline
script: Swagger UI's set-up script is served as a file (SpectacularSwaggerSplitView)."""

from csp.decorators import csp_update

DOCS_CSP_EXTRA = {"img-src": ["data:"], "worker-src": ["blob:"]}


def same_origin_only(view):
    """Wrap a docs view: the site's policy, plus the docs' data: images and blob: worker."""
    return csp_update(DOCS_CSP_EXTRA)(view)
