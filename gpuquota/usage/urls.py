from django.urls import path

from gpuquota.usage import api, views

urlpatterns = [
    path("fleet/", views.fleet, name="fleet"),
    path("fleet/utilization/", views.utilization, name="fleet_utilization"),
    path("fleet/glossary/", views.glossary, name="usage_glossary"),
    path("fleet/gpus/<str:uuid>/", views.gpu_detail, name="gpu_detail"),
    path("fleet/nodes/<int:pk>/", views.node_detail, name="node_detail"),
    path("fleet/gpus/<str:uuid>/recover/", views.gpu_recover, name="gpu_recover"),
    path("metrics", views.metrics, name="metrics"),
    path("api/v1/usage/fleet", api.FleetUsageView.as_view(), name="api-usage-fleet"),
    path("api/v1/usage/teams/<slug:team>", api.TeamUsageView.as_view(), name="api-usage-team"),
]
