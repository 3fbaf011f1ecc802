from django.contrib import admin
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from gpuquota.core.docs import same_origin_only
from gpuquota.core.health import healthz, readyz


def favicon(_request):
    return HttpResponsePermanentRedirect(static("img/favicon.svg"))


handler404 = "gpuquota.core.errorpages.page_not_found"
handler500 = "gpuquota.core.errorpages.server_error"


admin.site.site_header = "gpuquota administration"
admin.site.site_title = "gpuquota admin"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("favicon.ico", favicon),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", same_origin_only(SpectacularSwaggerSplitView.as_view(url_name="api-schema")),
         name="api-docs"),
    path("api/redoc/", same_origin_only(SpectacularRedocView.as_view(url_name="api-schema")),
         name="api-redoc"),
    path("", include("accounts.urls")),
    path("", include("gpuquota.reservations.urls")),
    path("", include("gpuquota.ingest.urls")),
    path("", include("gpuquota.rates.urls")),
    path("", include("gpuquota.usage.urls")),
    path("", include("gpuquota.schedulers.urls")),
    path("", include("gpuquota.schedulers.kubernetes.urls")),
    path("", include("gpuquota.lending.urls")),
    path("", include("gpuquota.lending.urls_pages")),
    path("", include("gpuquota.jobs.urls")),
    path("", include("gpuquota.reliability.urls")),
    path("", include("reports.urls")),
    path("", include("reports.page_urls")),
    path("", include("reclaim.urls")),
    path("", include("reclaim.urls_pages")),
    path("", include("gpuquota.telemetry.urls")),  # telemetry
]
