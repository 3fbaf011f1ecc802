from django.urls import path

from gpuquota.rates import views

urlpatterns = [
    path("manage/rate-cards/", views.rate_cards_page, name="manage_rate_cards"),
    path("manage/rate-cards/<int:pk>/end/", views.rate_card_end_view,
         name="manage_rate_card_end"),
]
