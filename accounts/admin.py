from django import forms
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin

from accounts.models import (
    ApiToken,
    ClusterIdentity,
    ExternalIdentity,
    MappingRule,
    Membership,
    Team,
    User,
)
from accounts.services import (
    api_token_revoke,
    identity_delete,
    identity_save,
    membership_delete,
    membership_save,
)
from accounts.sso.rules import (
    mapping_rule_check,
    mapping_rule_delete,
    mapping_rule_save,
    mapping_rule_warnings,
)
from gpuquota.core.admin import ReadOnlyAdmin
from gpuquota.core.errors import DomainError

SAVE = {
    MappingRule: lambda obj, actor: mapping_rule_save(rule=obj, actor=actor),
    Membership: lambda obj, actor: membership_save(membership=obj, actor=actor),
    ClusterIdentity: lambda obj, actor: identity_save(identity=obj, actor=actor),
}
DELETE = {
    MappingRule: lambda obj, actor: mapping_rule_delete(rule=obj, actor=actor),
    Membership: lambda obj, actor: membership_delete(membership=obj, actor=actor),
    ClusterIdentity: lambda obj, actor: identity_delete(identity=obj, actor=actor),
}


class ServicesSaveMixin:
    """Memberships and identities are saved through their services (audit, recompute
    of the usage they re-attribute), from their own pages and from inlines."""

    def save_model(self, request, obj, form, change):
        if type(obj) in SAVE:
            SAVE[type(obj)](obj, request.user)
        else:
            super().save_model(request, obj, form, change)

    def delete_model(self, request, obj):
        if type(obj) in DELETE:
            DELETE[type(obj)](obj, request.user)
        else:
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)

    def save_formset(self, request, form, formset, change):
        if formset.model not in SAVE:
            return super().save_formset(request, form, formset, change)
        instances = formset.save(commit=False)
        for obj in formset.deleted_objects:
            DELETE[formset.model](obj, request.user)
        for obj in instances:
            SAVE[formset.model](obj, request.user)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user", "team"]
    fields = ["user", "team", "role", "is_billing", "valid_from", "valid_until", "source"]
    readonly_fields = ["source"]


@admin.register(User)
class GpuquotaUserAdmin(ServicesSaveMixin, UserAdmin):
    fieldsets = (*UserAdmin.fieldsets, ("gpuquota", {"fields": ("timezone", "email_opt_out",
                                                                      "is_finance")}))
    list_display = ["username", "email", "first_name", "last_name", "is_staff", "is_finance",
                    "timezone"]
    list_filter = [*UserAdmin.list_filter, "is_finance"]
    inlines = [MembershipInline]


@admin.register(Team)
class TeamAdmin(ServicesSaveMixin, admin.ModelAdmin):
    list_display = ["name", "slug", "cost_center", "cost_center_owner_email"]
    search_fields = ["name", "slug", "cost_center", "cost_center_owner_email"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(ServicesSaveMixin, admin.ModelAdmin):
    list_display = ["user", "team", "role", "is_billing", "valid_from", "valid_until", "source"]
    list_filter = ["role", "is_billing", "source", "team"]
    readonly_fields = ["source"]
    search_fields = ["user__username", "user__email", "team__name"]
    autocomplete_fields = ["user", "team"]
    date_hierarchy = "valid_from"


@admin.register(ClusterIdentity)
class ClusterIdentityAdmin(ServicesSaveMixin, admin.ModelAdmin):
    list_display = ["cluster", "kind", "key", "user", "team", "valid_from", "valid_until"]
    list_filter = ["cluster", "kind"]
    search_fields = ["key", "user__username", "team__name"]
    autocomplete_fields = ["user", "team"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Read-only: tokens are issued by their owners on the profile page (one service,
    accounts.services.api_token_create); admins revoke anyone's here, through
    api_token_revoke."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "expires_at",
                    "revoked_at"]
    list_filter = ["revoked_at", "expires_at"]
    search_fields = ["name", "user__username", "prefix"]
    fields = ["name", "user", "prefix", "created_at", "last_used_at", "expires_at",
              "revoked_at"]
    readonly_fields = fields
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens", permissions=["view"])
    def revoke(self, request, queryset):
        live = [token for token in queryset if token.revoked_at is None]
        for token in live:
            api_token_revoke(token=token, actor=request.user)
        self.message_user(request, f"Revoked {len(live)} token(s).", messages.SUCCESS)


class MappingRuleForm(forms.ModelForm):
    """The service's checks as form errors, on the field at fault."""

    class Meta:
        model = MappingRule
        fields = ["position", "provider", "claim", "match", "value", "grant", "team",
                  "is_billing", "is_active"]

    def clean(self):
        data = super().clean()
        candidate = MappingRule(**{name: data.get(name) for name in (
            "position", "provider", "claim", "match", "value", "grant", "team", "is_billing",
            "is_active") if name in data})
        try:
            mapping_rule_check(candidate)
        except DomainError as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
        return data


@admin.register(MappingRule)
class MappingRuleAdmin(ServicesSaveMixin, admin.ModelAdmin):
    """Saved and deleted through accounts.sso.rules (audited); preview a change on
    /manage/sso/preview/ first."""

    list_display = ["position", "provider", "claim", "match", "value", "grant", "team",
                    "is_billing", "is_active"]
    list_display_links = ["position", "value"]
    list_filter = ["grant", "is_active", "provider"]
    search_fields = ["value", "claim", "team__name"]
    autocomplete_fields = ["team"]
    form = MappingRuleForm

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        for warning in mapping_rule_warnings(obj):
            self.message_user(request, f"{warning['field']}: {warning['message']}",
                              messages.WARNING)


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin):
    """Read-only: created and refreshed by logins through a provider."""

    list_display = ["user", "provider", "subject", "last_login_at", "admin_by_rules",
                    "disabled_at"]
    list_filter = ["source", "provider", "disabled_at"]
    search_fields = ["user__username", "subject", "issuer"]
    readonly_fields = ["user", "source", "provider", "issuer", "subject", "first_login_at",
                       "last_login_at", "last_claims", "claims_unread", "admin_by_rules",
                       "disabled_at", "disabled_reason"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
