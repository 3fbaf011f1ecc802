from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView


def healthz(_request):
    return HttpResponse("ok", content_type="text/plain")


admin.site.site_header = "gpuquota administration"
admin.site.site_title = "gpuquota admin"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("", include("accounts.urls")),
    path("", include("gpuquota.reservations.urls")),
    path("", include("gpuquota.ingest.urls")),
    path("", include("gpuquota.usage.urls")),
    path("", include("reports.urls")),
    path("", include("reclaim.urls")),
    path("", include("reclaim.urls_pages")),
]
