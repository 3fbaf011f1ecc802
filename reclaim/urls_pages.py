from django.urls import path

from reclaim import views

urlpatterns = [
    path("reclaim/", views.review, name="reclaim_review"),
    path("reclaim/accept/", views.accept_bulk, name="reclaim_accept_bulk"),
    path("reclaim/<int:pk>/", views.recommendation_detail, name="reclaim_detail"),
    path("reclaim/<int:pk>/accept/", views.accept, name="reclaim_accept"),
    path("reclaim/<int:pk>/dismiss/", views.dismiss, name="reclaim_dismiss"),
    path("reclaim/<int:pk>/uphold/", views.uphold, name="reclaim_uphold"),
    path("reclaim/<int:pk>/withdraw/", views.withdraw, name="reclaim_withdraw"),
    path("reclaim/<int:pk>/object/", views.object_, name="reclaim_object"),
    path("reclaim/exemptions/", views.exemption_create, name="reclaim_exemption_create"),
    path("reclaim/exemptions/<int:pk>/end/", views.exemption_end, name="reclaim_exemption_end"),
    path("reclaim/reservations/<int:pk>/release-idle/", views.release_idle,
         name="reclaim_release_idle"),
]
