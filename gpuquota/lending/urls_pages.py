from django.urls import path

from gpuquota.lending import views

urlpatterns = [
    path("lending/", views.lending_admin, name="lending_admin"),
    path("lending/loans/<int:pk>/return/", views.loan_return, name="lending_return"),
    path("lending/reservations/<int:pk>/lend-now/", views.lend_now, name="lending_lend_now"),
    path("lending/teams/<slug:slug>/opt-outs/", views.optout_create,
         name="lending_optout_create"),
    path("lending/opt-outs/<int:pk>/end/", views.optout_end, name="lending_optout_end"),
]
