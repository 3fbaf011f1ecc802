from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import is_admin
from accounts.selectors import memberships_current


class MembershipOutSerializer(serializers.Serializer):
    team = serializers.CharField(source="team.slug")
    role = serializers.CharField()
    is_billing = serializers.BooleanField()


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.EmailField()
    timezone = serializers.CharField()
    is_admin = serializers.BooleanField()
    memberships = MembershipOutSerializer(many=True)


class MeView(APIView):
    """The signed-in user, their role and current memberships."""

    @extend_schema(responses=MeSerializer)
    def get(self, request):
        user = request.user
        data = {
            "username": user.username,
            "email": user.email,
            "timezone": user.timezone,
            "is_admin": is_admin(user),
            "memberships": memberships_current(user=user).select_related("team"),
        }
        return Response(MeSerializer(data).data)
