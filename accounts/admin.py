from django.contrib import admin
from django.contrib.auth.admin import UserAdmin

from accounts.models import ApiToken, ClusterIdentity, Membership, Team, User


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user", "team"]
    fields = ["user", "team", "role", "is_billing", "valid_from", "valid_until"]


@admin.register(User)
class GpuquotaUserAdmin(UserAdmin):
    fieldsets = (*UserAdmin.fieldsets, ("gpuquota", {"fields": ("timezone", "email_opt_out")}))
    list_display = ["username", "email", "first_name", "last_name", "is_staff", "timezone"]
    inlines = [MembershipInline]


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "cost_center"]
    search_fields = ["name", "slug", "cost_center"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role", "is_billing", "valid_from", "valid_until"]
    list_filter = ["role", "is_billing", "team"]
    search_fields = ["user__username", "user__email", "team__name"]
    autocomplete_fields = ["user", "team"]
    date_hierarchy = "valid_from"


@admin.register(ClusterIdentity)
class ClusterIdentityAdmin(admin.ModelAdmin):
    list_display = ["cluster", "kind", "key", "user", "team", "valid_from", "valid_until"]
    list_filter = ["cluster", "kind"]
    search_fields = ["key", "user__username", "team__name"]
    autocomplete_fields = ["user", "team"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "prefix"]
    readonly_fields = ["prefix", "key_hash", "created_at", "last_used_at"]
