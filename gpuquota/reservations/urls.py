from django.urls import path

from gpuquota.reservations import api, views, views_manage

urlpatterns = [
    # pages
    path("teams/<slug:slug>/", views.team_detail, name="team_detail"),
    path("reservations/new/", views.reservation_new, name="reservation_new"),
    path("reservations/availability/", views.availability_grid, name="reservation_availability"),
    path("reservations/window-check/", views.window_check, name="reservation_window_check"),
    path("reservations/<int:pk>/release/", views.reservation_release_view,
         name="reservation_release"),
    path("reservations/<int:pk>/cancel/", views.reservation_cancel_view, name="reservation_cancel"),
    path("reservations/<int:pk>/extend/", views.reservation_extend_view, name="reservation_extend"),
    path("reservations/pending/", views.pending_queue, name="reservation_pending"),
    path("reservations/<int:pk>/decide/", views.reservation_decide, name="reservation_decide"),
    path("reservations/backfill/", views.reservation_backfill, name="reservation_backfill"),
    path("reservations/maintenance/", views.maintenance_new, name="maintenance_new"),
    path("manage/", views_manage.manage_home, name="manage_home"),
    path("manage/quotas/", views_manage.quotas_page, name="manage_quotas"),
    path("manage/quotas/<int:pk>/end/", views_manage.quota_end_view, name="manage_quota_end"),
    path("manage/reservations/", views_manage.reservations_page, name="manage_reservations"),
    # API
    path("api/v1/teams", api.TeamListView.as_view(), name="api-teams"),
    path("api/v1/gpu-classes", api.GpuClassListView.as_view(), name="api-gpu-classes"),
    path("api/v1/availability", api.AvailabilityView.as_view(), name="api-availability"),
    path("api/v1/reservations", api.ReservationListView.as_view(), name="api-reservations"),
    path("api/v1/reservations/<int:pk>", api.ReservationDetailView.as_view(),
         name="api-reservation"),
    path("api/v1/reservations/<int:pk>/release", api.ReleaseView.as_view(),
         name="api-reservation-release"),
    path("api/v1/reservations/<int:pk>/cancel", api.CancelView.as_view(),
         name="api-reservation-cancel"),
    path("api/v1/reservations/<int:pk>/extend", api.ExtendView.as_view(),
         name="api-reservation-extend"),
    path("api/v1/reservations/<int:pk>/shrink", api.ShrinkView.as_view(),
         name="api-reservation-shrink"),
    path("api/v1/reservations/<int:pk>/swap", api.SwapView.as_view(),
         name="api-reservation-swap"),
    path("api/v1/reservations/<int:pk>/approve", api.ApproveView.as_view(),
         name="api-reservation-approve"),
    path("api/v1/reservations/<int:pk>/deny", api.DenyView.as_view(), name="api-reservation-deny"),
    path("api/v1/audit", api.AuditListView.as_view(), name="api-audit"),
]
