from django.urls import path

from gpuquota.schedulers import views

urlpatterns = [
    path("schedulers/", views.clusters, name="scheduler_clusters"),
    path("schedulers/<slug:slug>/", views.cluster_detail, name="scheduler_cluster"),
    path("schedulers/<slug:slug>/reconcile", views.cluster_reconcile_now,
         name="scheduler_reconcile"),
    path("schedulers/<slug:slug>/export/<str:name>", views.cluster_export,
         name="scheduler_export"),
]
