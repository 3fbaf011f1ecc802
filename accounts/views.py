from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from accounts.forms import ProfileForm
from accounts.selectors import teams_visible


@login_required
def home(request):
    """The landing page: a member of exactly one team goes straight to it."""
    teams = list(teams_visible(user=request.user))
    if len(teams) == 1 and not request.user.is_staff:
        return redirect("team_detail", slug=teams[0].slug)
    return render(request, "accounts/home.html", {"teams": teams})


@login_required
def profile(request):
    form = ProfileForm(request.POST or None, instance=request.user)
    if request.method == "POST" and form.is_valid():
        form.save()
        messages.success(request, "Profile saved.")
        return redirect("profile")
    return render(request, "accounts/profile.html", {"form": form})
