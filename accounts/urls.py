from django.urls import path

from accounts import api, views
from accounts.sso import api as sso_api
from accounts.sso import pages as sso_pages
from accounts.sso import views as sso_views

urlpatterns = [
    path("", views.home, name="home"),
    path("accounts/login/", sso_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", sso_views.LogoutView.as_view(), name="logout"),
    path("accounts/oidc/<slug:provider>/login/", sso_views.OidcLoginView.as_view(),
         name="oidc_login"),
    path("accounts/oidc/callback/", sso_views.oidc_callback, name="oidc_callback"),
    path("manage/sso/preview/", sso_pages.rules_preview_page, name="sso_rules_preview"),
    path("manage/sso/links/", sso_pages.links_page, name="sso_links"),
    path("manage/sso/links/<int:pk>/", sso_pages.link_decide, name="sso_link_decide"),
    path("api/v1/sso/rules", sso_api.RuleListView.as_view(), name="api-sso-rules"),
    path("api/v1/sso/rules/<int:pk>", sso_api.RuleDetailView.as_view(), name="api-sso-rule"),
    path("api/v1/sso/rules/preview", sso_api.RulePreviewView.as_view(),
         name="api-sso-rules-preview"),
    path("accounts/profile/", views.profile, name="profile"),
    path("accounts/profile/tokens/", views.api_token_new, name="api_token_new"),
    path("accounts/profile/tokens/<int:pk>/revoke/", views.api_token_revoke_view,
         name="api_token_revoke"),
    path("api/v1/me", api.MeView.as_view(), name="api-me"),
]
