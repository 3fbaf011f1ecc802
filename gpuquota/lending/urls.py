from django.urls import path

from gpuquota.lending import api

P = "api/v1/lending/"
urlpatterns = [
    path(f"{P}loans", api.LoanListView.as_view(), name="api-lending-loans"),
    path(f"{P}loans/<int:pk>", api.LoanDetailView.as_view(), name="api-lending-loan"),
    path(f"{P}loans/<int:pk>/return", api.LoanReturnView.as_view(), name="api-lending-return"),
    path(f"{P}lend-now", api.LendNowView.as_view(), name="api-lending-lend-now"),
    path(f"{P}pool", api.PoolView.as_view(), name="api-lending-pool"),
    path(f"{P}returns", api.ReturnsView.as_view(), name="api-lending-returns"),
    path(f"{P}policy", api.PolicyView.as_view(), name="api-lending-policy"),
    path(f"{P}opt-outs", api.OptOutListView.as_view(), name="api-lending-optouts"),
    path(f"{P}opt-outs/<int:pk>/end", api.OptOutEndView.as_view(),
         name="api-lending-optout-end"),
]
