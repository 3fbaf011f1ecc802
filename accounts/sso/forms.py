"""The password login: directory (LDAP/AD) users and, where the setting limits them,
only the break-glass local accounts."""

from django import forms
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm

from accounts.sso import conf
from accounts.sso.services import LoginRefused


class LocalBackend(ModelBackend):
    """Local passwords; limited to GPUQUOTA_LOCAL_LOGIN_USERS when that is set."""

    def user_can_authenticate(self, user) -> bool:
        allowed = conf.break_glass_users()
        if allowed and user.username not in allowed:
            return False
        return super().user_can_authenticate(user)


class LoginForm(AuthenticationForm):
    """The login form, with the refusal of a directory login as its message."""

    def clean(self):
        try:
            return super().clean()
        except LoginRefused as exc:
            raise forms.ValidationError(exc.message, code="login_refused") from exc
        except forms.ValidationError:
            username = self.cleaned_data.get("username") or ""
            allowed = conf.break_glass_users()
            if allowed and username not in allowed and conf.ldap_directory() is None:
                raise forms.ValidationError(
                    "Passwords here are only for break-glass accounts: log in with your "
                    "organisation's account (the buttons above).",
                    code="break_glass_only") from None
            raise
