from django.urls import path

from gpuquota.telemetry import api, views

urlpatterns = [
    path("telemetry/sources/", views.sources, name="telemetry_sources"),
    path("telemetry/sources/<int:pk>/", views.source_edit, name="telemetry_source_edit"),
    path("telemetry/sources/<int:pk>/delete", views.source_remove,
         name="telemetry_source_delete"),
    path("telemetry/sources/<int:pk>/pull", views.source_pull_now, name="telemetry_source_pull"),
    path("api/v1/telemetry/sources", api.SourceListView.as_view(), name="api_telemetry_sources"),
    path("api/v1/telemetry/sources/<int:pk>", api.SourceDetailView.as_view(),
         name="api_telemetry_source"),
]
