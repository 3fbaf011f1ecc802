from django.urls import path

from reports import views, views_admin_channels, views_budgets, views_user_channels

urlpatterns = [
    path("teams/<slug:slug>/budget/", views_budgets.team_budget_set, name="team_budget_set"),
    path("teams/<slug:slug>/budget/hours/", views_budgets.team_class_hours_budget_set,
         name="team_class_hours_budget_set"),
    path("teams/<slug:slug>/channels/", views_budgets.team_channel_add, name="team_channel_add"),
    path("teams/<slug:slug>/channels/<int:channel_id>/test/", views_budgets.team_channel_test,
         name="team_channel_test"),
    path("teams/<slug:slug>/channels/<int:channel_id>/events/",
         views_budgets.team_channel_events, name="team_channel_events"),
    path("teams/<slug:slug>/channels/<int:channel_id>/remove/",
         views_budgets.team_channel_remove, name="team_channel_remove"),
    path("manage/channels/", views_admin_channels.manage_channels, name="manage_channels"),
    path("manage/channels/<int:channel_id>/test/", views_admin_channels.manage_channel_test,
         name="manage_channel_test"),
    path("manage/channels/<int:channel_id>/events/",
         views_admin_channels.manage_channel_events, name="manage_channel_events"),
    path("manage/channels/<int:channel_id>/remove/",
         views_admin_channels.manage_channel_remove, name="manage_channel_remove"),
    path("accounts/profile/channels/", views_user_channels.user_channel_add_view,
         name="user_channel_add"),
    path("accounts/profile/channels/<int:channel_id>/test/",
         views_user_channels.user_channel_test_view, name="user_channel_test"),
    path("accounts/profile/channels/<int:channel_id>/events/",
         views_user_channels.user_channel_events_view, name="user_channel_events"),
    path("accounts/profile/channels/<int:channel_id>/remove/",
         views_user_channels.user_channel_remove_view, name="user_channel_remove"),
    path("statements/review/", views.statement_review, name="statement_review"),
    path("statements/review/draft/", views.statements_draft_all, name="statements_draft_all"),
    path("statements/review/approve/", views.statements_approve_all, name="statements_approve_all"),
    path("statements/<slug:slug>/<str:month>/", views.statement_detail, name="statement_detail"),
    path(
        "statements/<slug:slug>/<str:month>/approve/",
        views.statement_approve_view,
        name="statement_approve",
    ),
    path(
        "statements/<slug:slug>/<str:month>/adjustments/",
        views.statement_adjust,
        name="statement_adjust",
    ),
    path(
        "statements/<slug:slug>/<str:month>/late-usage/",
        views.statement_late_adjust,
        name="statement_late_adjust",
    ),
    path(
        "statements/<slug:slug>/<str:month>.csv", views.statement_csv_download, name="statement_csv"
    ),
    path(
        "statements/<slug:slug>/<str:month>.pdf", views.statement_pdf_download, name="statement_pdf"
    ),
]
