from django.urls import path

from gpuquota.schedulers.kubernetes import views

urlpatterns = [
    path("kubernetes/<slug:slug>/", views.cluster_page, name="kubernetes_cluster"),
]
