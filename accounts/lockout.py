"""What a locked-out login sees (django-axes' AXES_LOCKOUT_CALLABLE): the login page
it came from, product or admin, with the reason and when to try again."""

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.forms.utils import ErrorDict
from django.shortcuts import render

LOCKED_STATUS = 429


def lockout_message() -> str:
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    return (f"Too many failed logins for this account or from your address: logins are "
            f"locked for {minutes} minutes. An admin can unlock it sooner.")


def _form_with_message(form_class, request):
    """An unbound login form carrying the message as its error: validating a bound
    form would try the password again and count one more failure."""
    form = form_class(request, initial={"username": request.POST.get("username", "")})
    form._errors = ErrorDict({"__all__": form.error_class([lockout_message()],
                                                          error_class="nonfield")})
    return form


def login_locked_out(request, original_response=None, credentials=None):
    """The login form again, with the lockout message, as a 429."""
    if request.path.startswith("/admin/"):
        context = {**admin.site.each_context(request), "title": "Log in",
                   "form": _form_with_message(AdminAuthenticationForm, request),
                   "app_path": request.get_full_path(), "username": ""}
        return render(request, "admin/login.html", context, status=LOCKED_STATUS)
    form = _form_with_message(AuthenticationForm, request)
    return render(request, "accounts/login.html", {"form": form}, status=LOCKED_STATUS)
