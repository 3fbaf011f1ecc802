from django.urls import path

from gpuquota.ingest import views, views_enrol

AGENT_BATCHES_PATH = "/api/v1/agent/batches"  # served by `middleware.AgentEndpointMiddleware`

urlpatterns = [
    path(AGENT_BATCHES_PATH[1:], views.agent_batches, name="agent_batches"),
    path("api/v1/agent/enrol", views_enrol.agent_enrol, name="agent_enrol"),
    path("ingest/nodes/", views.nodes, name="ingest_nodes"),
    path("ingest/nodes/<int:pk>/rotate", views.node_rotate, name="ingest_node_rotate"),
    path("ingest/nodes/<int:pk>/revoke", views.node_revoke, name="ingest_node_revoke"),
    path("ingest/clusters/<slug:slug>/bootstrap", views_enrol.cluster_bootstrap,
         name="ingest_cluster_bootstrap"),
    path("ingest/clusters/<slug:slug>/bootstrap/rotate", views_enrol.cluster_bootstrap_rotate,
         name="ingest_cluster_bootstrap_rotate"),
    path("ingest/clusters/<slug:slug>/bootstrap/revoke", views_enrol.cluster_bootstrap_revoke,
         name="ingest_cluster_bootstrap_revoke"),
]
