"""The mapping rules over the API (admins): list, create, change, delete, preview."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import MappingRule, Team, User
from accounts.permissions import IsPlatformAdmin
from accounts.sso.rules import (
    mapping_rule_check,
    mapping_rule_delete,
    mapping_rule_save,
    mapping_rule_warnings,
    rules_preview,
    rules_with_candidate,
)
from gpuquota.core.parsers import SafeJSONParser

#: Non-admins are told no (the rules are no secret: the login page's outcome shows them).
FORBIDDEN = {403: OpenApiResponse({"$ref": "#/components/schemas/Error"},
                                  description="Platform admins only.")}
NOT_FOUND = {404: OpenApiResponse({"$ref": "#/components/schemas/Error"},
                                  description="No such rule.")}


def _choices_message(name: str) -> str:
    """DRF's refusal of a choice, listing the choices (`{input}` is filled in by DRF)."""
    field = MappingRule._meta.get_field(name)
    return f"“{{input}}” is not one of {', '.join(value for value, _ in field.choices)}."


class RuleSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all(),
                                        allow_null=True, required=False)

    class Meta:
        model = MappingRule
        fields = ["id", "position", "provider", "claim", "match", "value", "grant", "team",
                  "is_billing", "is_active"]
        read_only_fields = ["id"]
        validators = []  # the model's constraints are checked by the service, by name
        extra_kwargs = {name: {"error_messages": {"invalid_choice": _choices_message(name)}}
                        for name in ("match", "grant")}


class RuleWarningSerializer(serializers.Serializer):
    field = serializers.CharField()
    message = serializers.CharField()


class RuleSavedSerializer(RuleSerializer):
    warnings = RuleWarningSerializer(many=True, read_only=True, help_text="What is worth "
                                     "knowing of the rule as saved, e.g. that no login of "
                                     "the last days carried its claim; empty: nothing.")

    class Meta(RuleSerializer.Meta):
        fields = [*RuleSerializer.Meta.fields, "warnings"]


def _saved(rule: MappingRule) -> dict:
    return {**RuleSerializer(rule).data, "warnings": mapping_rule_warnings(rule)}


class PreviewInSerializer(serializers.Serializer):
    rule = RuleSerializer(required=False, help_text="A rule as it would be saved (with its "
                          "id to change a saved one); absent: the saved rules as they are.")
    rule_id = serializers.IntegerField(required=False)
    user = serializers.SlugRelatedField(slug_field="username", queryset=User.objects.all(),
                                        required=False, allow_null=True,
                                        help_text="One user; absent: everyone who logged in "
                                        "through a provider in the last 30 days.")


class PreviewRowSerializer(serializers.Serializer):
    user = serializers.CharField(source="user.username")
    provider = serializers.CharField()
    last_login_at = serializers.DateTimeField()
    started = serializers.ListField(child=serializers.CharField())
    ended = serializers.ListField(child=serializers.CharField())
    admin = serializers.CharField()
    refused = serializers.CharField()
    kept = serializers.CharField(help_text="What the login would keep as it is because a "
                                 "rule could not read its claim, and why; empty: nothing.")


def _rule_from(serializer: RuleSerializer, instance: MappingRule | None = None) -> MappingRule:
    rule = instance or MappingRule()
    for name, value in serializer.validated_data.items():
        setattr(rule, name, value)
    return rule


class RuleListView(APIView):
    """The mapping rules in the order they are read; admins add one (audited)."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(responses={200: RuleSerializer(many=True), **FORBIDDEN})
    def get(self, request):
        rules = MappingRule.objects.select_related("team")
        return Response(RuleSerializer(rules, many=True).data)

    @extend_schema(request=RuleSerializer, responses={201: RuleSavedSerializer, **FORBIDDEN})
    def post(self, request):
        serializer = RuleSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rule = mapping_rule_save(rule=_rule_from(serializer), actor=request.user)
        return Response(_saved(rule), status=status.HTTP_201_CREATED)


class RuleDetailView(APIView):
    """One rule: read, change (audited), delete (audited)."""

    permission_classes = [IsPlatformAdmin]

    @extend_schema(responses={200: RuleSerializer, **NOT_FOUND, **FORBIDDEN})
    def get(self, request, pk: int):
        return Response(RuleSerializer(get_object_or_404(MappingRule, pk=pk)).data)

    @extend_schema(request=RuleSerializer,
                   responses={200: RuleSavedSerializer, **NOT_FOUND, **FORBIDDEN})
    def patch(self, request, pk: int):
        rule = get_object_or_404(MappingRule, pk=pk)
        serializer = RuleSerializer(rule, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        rule = mapping_rule_save(rule=_rule_from(serializer, rule), actor=request.user)
        return Response(_saved(rule))

    @extend_schema(responses={204: None, **NOT_FOUND, **FORBIDDEN})
    def delete(self, request, pk: int):
        mapping_rule_delete(rule=get_object_or_404(MappingRule, pk=pk), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class RulePreviewView(APIView):
    """What the rules, with one rule added or changed, would do at the next logins: to one
    user, or to everyone who logged in during the last 30 days. Saves nothing."""

    permission_classes = [IsPlatformAdmin]
    parser_classes = [SafeJSONParser]  # a rule is nested: JSON only, never a form

    @extend_schema(request=PreviewInSerializer,
                   responses={200: PreviewRowSerializer(many=True), **NOT_FOUND,
                              **FORBIDDEN})
    def post(self, request):
        body = PreviewInSerializer(data=request.data, partial=True)  # a rule's changes only
        body.is_valid(raise_exception=True)
        candidate = None
        if "rule" in body.validated_data:
            rule_id = body.validated_data.get("rule_id")
            base = get_object_or_404(MappingRule, pk=rule_id) if rule_id else MappingRule()
            candidate = base
            for name, value in body.validated_data["rule"].items():
                setattr(candidate, name, value)
            mapping_rule_check(candidate)
        rows = rules_preview(rules=rules_with_candidate(candidate=candidate),
                             user=body.validated_data.get("user"))
        return Response(PreviewRowSerializer(rows, many=True).data)
