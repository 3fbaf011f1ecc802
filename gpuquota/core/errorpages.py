"""The product's own 404, 500 and 503 pages, also in the embedded default (DEBUG), where
Django would show its debug pages: those stay for platform admins, who may need the
traceback; everyone else sees the product's page. The API keeps its JSON errors. An
unreachable database is a 503 with Retry-After for everyone (`gpuquota.core.unavailable`)."""

import logging
import sys

from django.conf import settings
from django.http import Http404
from django.shortcuts import render

from gpuquota.core.unavailable import database_unavailable, unavailable_response

logger = logging.getLogger("django.request")


def _wants_product_page(request) -> bool:
    user = getattr(request, "user", None)  # read once the database answered (lazy)
    return settings.DEBUG and not (user is not None and user.is_staff) \
        and not request.path.startswith("/api/")


class ProductErrorPagesMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (response.status_code == 404 and _wants_product_page(request)
                and response.get("Content-Type", "").startswith("text/html")
                and not getattr(response, "product_page", False)):
            return page_not_found(request)
        return response

    def process_exception(self, request, exception):
        if database_unavailable(exception):
            return unavailable_response(request)  # asking who the user is needs it too
        if not _wants_product_page(request):
            return None
        if isinstance(exception, Http404):
            return page_not_found(request)
        logger.error("Internal Server Error: %s", request.path, exc_info=exception)
        return server_error_page(request)


def page_not_found(request, exception=None):
    """handler404: the product's page, with the navigation."""
    response = render(request, "404.html", status=404)
    response.product_page = True
    return response


def server_error_page(request):
    """The 500 page without the request's context (it must render whatever broke)."""
    return render(None, "500.html", status=500)


def server_error(request):
    """handler500 (DEBUG=0): the exception being handled decides. An unreachable database,
    raised in a view or in a middleware (the session, the user), is the 503 page with
    Retry-After; anything else the 500 page."""
    if database_unavailable(sys.exc_info()[1]):
        return unavailable_response(request)
    return server_error_page(request)
