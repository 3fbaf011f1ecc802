from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "People and teams"

    def ready(self) -> None:
        from django.core import checks

        from accounts import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from accounts.sso.checks import sso_settings_check

        checks.register(sso_settings_check)
