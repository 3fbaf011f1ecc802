from django.urls import path

from gpuquota.ingest import views

urlpatterns = [
    path("api/v1/agent/batches", views.agent_batches, name="agent_batches"),
    path("ingest/nodes/", views.nodes, name="ingest_nodes"),
    path("ingest/nodes/<int:pk>/rotate", views.node_rotate, name="ingest_node_rotate"),
    path("ingest/nodes/<int:pk>/revoke", views.node_revoke, name="ingest_node_revoke"),
]
