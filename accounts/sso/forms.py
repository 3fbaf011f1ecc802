"""The password login: directory (LDAP/AD) users and, where the setting limits them,
only the break-glass local accounts."""

from django import forms
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm

from accounts.sso import conf
from accounts.sso.errors import LoginRefused


class LocalBackend(ModelBackend):
    """Local passwords; limited to GPUQUOTA_LOCAL_LOGIN_USERS when that is set."""

    def user_can_authenticate(self, user) -> bool:
        allowed = conf.break_glass_users()
        if allowed and user.username not in allowed:
            return False
        return super().user_can_authenticate(user)


def password_refused_message() -> str:
    """The one answer to every refused password: a wrong password, an unknown name, a
    name that may not use a password here; which one is never said (no enumeration)."""
    message = "Wrong user name or password."
    if conf.break_glass_users():
        accounts = "directory and break-glass accounts" if conf.ldap_directory() else \
            "break-glass accounts"
        message += f" Passwords here are only for {accounts}"
        message += ("; everyone else logs in with the organisation's account (the buttons "
                    "above)." if conf.oidc_providers() else ".")
    return message


class LoginForm(AuthenticationForm):
    """The login form, with the refusal of a directory login as its message."""

    def clean(self):
        try:
            return super().clean()
        except LoginRefused as exc:
            raise forms.ValidationError(exc.message, code="login_refused") from exc
        except forms.ValidationError as exc:
            if exc.code in ("invalid_login", "inactive"):
                raise forms.ValidationError(password_refused_message(),
                                            code="invalid_login") from None
            raise
