from django.urls import path

from gpuquota.reservations import views

urlpatterns = [
    path("teams/<slug:slug>/", views.team_detail, name="team_detail"),
]
