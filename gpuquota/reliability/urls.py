from django.urls import path

from gpuquota.reliability import api, views

urlpatterns = [
    path("fleet/reliability/", views.fleet_reliability, name="fleet_reliability"),
    path("fleet/reliability/drains/<int:pk>/return/", views.drain_return, name="drain_return"),
    path("fleet/gpus/<str:uuid>/rma/", views.gpu_rma, name="gpu_rma"),
    path("api/v1/reliability/lemons", api.LemonsView.as_view(), name="api-reliability-lemons"),
    path("api/v1/reliability/figures", api.FiguresView.as_view(),
         name="api-reliability-figures"),
]
