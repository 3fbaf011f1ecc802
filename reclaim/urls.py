from django.urls import path

from reclaim import api

P = "api/v1/reclaim/"
urlpatterns = [
    path(f"{P}recommendations", api.RecommendationListView.as_view(),
         name="api-reclaim-recommendations"),
    path(f"{P}recommendations/bulk-accept", api.BulkAcceptView.as_view(),
         name="api-reclaim-bulk-accept"),
    path(f"{P}recommendations/<int:pk>", api.RecommendationDetailView.as_view(),
         name="api-reclaim-recommendation"),
    *[path(f"{P}recommendations/<int:pk>/{action}", view.as_view(),
           name=f"api-reclaim-{action}")
      for action, view in (("accept", api.AcceptView), ("dismiss", api.DismissView),
                           ("object", api.ObjectView), ("uphold", api.UpholdView),
                           ("withdraw", api.WithdrawView))],
    path(f"{P}reservations/<int:pk>/release-idle", api.ReleaseIdleView.as_view(),
         name="api-reclaim-release-idle"),
    path(f"{P}exemptions", api.ExemptionListView.as_view(), name="api-reclaim-exemptions"),
    path(f"{P}exemptions/<int:pk>", api.ExemptionDetailView.as_view(),
         name="api-reclaim-exemption"),
    path(f"{P}backtest", api.BacktestView.as_view(), name="api-reclaim-backtest"),
    path(f"{P}figures", api.FiguresView.as_view(), name="api-reclaim-figures"),
]
