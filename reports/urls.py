from django.urls import path

from reports import api, api_budgets

urlpatterns = [
    path("api/v1/teams/<slug:slug>/budget", api_budgets.TeamBudgetView.as_view(),
         name="api-team-budget"),
    path("api/v1/teams/<slug:slug>/budget/hours", api_budgets.TeamClassHoursBudgetView.as_view(),
         name="api-team-class-hours-budget"),
    path("api/v1/focus/<str:period>.csv", api.FocusMonthCsvView.as_view(),
         name="api-focus-month-csv"),
    path("api/v1/focus/<str:period>", api.FocusMonthView.as_view(), name="api-focus-month"),
    path("api/v1/statements/<str:period>.csv", api.OrganisationStatementsCsvView.as_view(),
         name="api-statements-month-csv"),
    path("api/v1/statements/<str:period>", api.OrganisationStatementsView.as_view(),
         name="api-statements-month"),
    path("api/v1/statements/<slug:team>/<str:period>.csv", api.TeamStatementCsvView.as_view(),
         name="api-statement-csv"),
    path("api/v1/statements/<slug:team>/<str:period>.pdf", api.TeamStatementPdfView.as_view(),
         name="api-statement-pdf"),
    path("api/v1/statements/<slug:team>/<str:period>", api.TeamStatementView.as_view(),
         name="api-statement"),
]
