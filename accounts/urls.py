from django.contrib.auth import views as auth_views
from django.urls import path

from accounts import api, views

urlpatterns = [
    path("", views.home, name="home"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(
            template_name="accounts/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/profile/", views.profile, name="profile"),
    path("accounts/profile/tokens/", views.api_token_new, name="api_token_new"),
    path("accounts/profile/tokens/<int:pk>/revoke/", views.api_token_revoke_view,
         name="api_token_revoke"),
    path("api/v1/me", api.MeView.as_view(), name="api-me"),
]
