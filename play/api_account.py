"""The account API: sign up, log in and out, password, the player's AI
settings and their model-call log. Views parse, call one service, serialize."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate, login, logout
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from config import local_model
from config.serializer_fields import valid as _valid
from play import account_serializers as s
from play import changes
from stories import limits, providers
from stories.accounts import ai_settings, auth
from stories.models import ProviderCall
from stories.prompt import sampling
from stories.providers import endpoint

DEBUG_LOG_SIZE = 30  # provider calls shown to a user


class SignupView(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(request=s.SignupSerializer, responses={201: s.TokenSerializer}, tags=["auth"])
    def post(self, request):
        limits.signup_open(ip=auth.client_ip(request))  # before the name is looked at: no enumeration
        data = _valid(s.SignupSerializer, request)
        user, token = auth.signup(
            username=data["username"],
            password=data["password"],
            email=data.get("email", ""),
            ip=auth.client_ip(request),
        )
        login(request, user, backend=auth.BACKEND)
        return Response(s.TokenSerializer({"token": token, "username": user.username}).data, status=201)


class LoginView(APIView):
    permission_classes = [AllowAny]
    authentication_classes = []

    @extend_schema(request=s.LoginSerializer, responses={200: s.TokenSerializer}, tags=["auth"])
    def post(self, request):
        data = _valid(s.LoginSerializer, request)
        user = authenticate(request, username=data["username"], password=data["password"])
        if user is None:
            if auth.login_throttled(request):
                return Response(
                    {"detail": auth.THROTTLED},
                    status=429,
                    headers={"Retry-After": str(settings.LOGIN_FAILURE_WINDOW_S)},
                )
            return Response({"detail": "wrong username or password"}, status=401, headers={"WWW-Authenticate": "Token"})
        token = auth.api_token_for(user)
        login(request, user)
        return Response(s.TokenSerializer({"token": token, "username": user.username}).data)


class LogoutView(APIView):
    @extend_schema(request=None, responses={204: None}, tags=["auth"])
    def post(self, request):
        auth.api_tokens_end(request.user)
        logout(request)
        return Response(status=204)


class PasswordView(APIView):
    @extend_schema(
        request=s.PasswordChangeSerializer,
        responses={200: s.TokenSerializer},
        tags=["auth"],
        description="Change your password. Every other session and API token of the account ends; "
        "the answer carries this client's new token.",
    )
    def post(self, request):
        data = _valid(s.PasswordChangeSerializer, request, context={"user": request.user})
        token = auth.password_change(
            request=request, old_password=data["old_password"], new_password=data["new_password"]
        )
        return Response(s.TokenSerializer({"token": token, "username": request.user.username}).data)


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer, tags=["auth"])
    def get(self, request):
        return Response(s.MeSerializer(request.user).data)


class SettingsView(APIView):
    @extend_schema(responses=s.AISettingsSerializer, tags=["settings"])
    def get(self, request):
        return Response(s.AISettingsSerializer(ai_settings.ai_settings_of(user_id=request.user.id)).data)

    @extend_schema(request=s.AISettingsSerializer, responses=s.AISettingsSerializer, tags=["settings"])
    def patch(self, request):
        data = _valid(s.AISettingsSerializer, request, partial=True)
        obj = changes.ai_settings_change(user_id=request.user.id, api_key=data.pop("api_key", None), **data)
        return Response(s.AISettingsSerializer(obj).data)

    put = patch


class SettingsPresetsView(APIView):
    @extend_schema(responses=s.PresetsSerializer, tags=["settings"], summary="Sampling presets")
    def get(self, request):
        presets = [
            {"name": name, "note": sampling.PRESET_NOTES[name], "values": values}
            for name, values in sampling.PRESETS.items()
        ]
        return Response(s.PresetsSerializer({"presets": presets}).data)


class SettingsDemoView(APIView):
    @extend_schema(responses=s.DemoModelSerializer, tags=["settings"], summary="The site's demo model and its state")
    def get(self, request):
        available = ai_settings.demo_available()
        local = ai_settings.demo_local_status()
        if local is not None:
            message = local_model.describe(local)
        else:
            message = "The site's demo model plays for players without their own." if available else "No demo model."
        return Response(
            s.DemoModelSerializer(
                {
                    "available": available,
                    "local": local is not None,
                    "state": local["state"] if local else None,
                    "message": message,
                }
            ).data
        )


class SettingsModelsView(APIView):
    @extend_schema(responses=s.ModelListSerializer, tags=["settings"], summary="The models your endpoint lists")
    def get(self, request):
        conn = ai_settings.connection_for_listing(user_id=request.user.id)
        return Response(s.ModelListSerializer({"models": endpoint.models(conn=conn, user_id=request.user.id)}).data)

    @extend_schema(
        request=s.TypedConnectionSerializer,
        responses=s.ModelListSerializer,
        tags=["settings"],
        summary="The models an endpoint lists, as typed in the form (before saving)",
    )
    def post(self, request):
        conn = ai_settings.connection_typed(user_id=request.user.id, need_model=False, **_typed(request))
        return Response(s.ModelListSerializer({"models": endpoint.models(conn=conn, user_id=request.user.id)}).data)


def _typed(request) -> dict:
    """The form's endpoint, key and model as typed; a field not sent is the stored one."""
    data = _valid(s.TypedConnectionSerializer, request)
    return {name: data.get(name) for name in ("endpoint_url", "api_key", "model")}


class SettingsTestView(APIView):
    @extend_schema(
        request=s.TypedConnectionSerializer,
        responses={200: s.TestConnectionResultSerializer},
        tags=["settings"],
        description="Tests the endpoint, key and model sent (as typed in the form); a field not sent is the "
        "stored one. The stored key goes only to the endpoint it was entered for.",
    )
    def post(self, request):
        conn = ai_settings.connection_typed(user_id=request.user.id, need_model=True, **_typed(request))
        result = providers.complete(
            conn=conn,
            messages=[{"role": "user", "content": "Reply with the word: ok"}],
            max_tokens=5,
            temperature=0.0,
            user_id=request.user.id,
            purpose=ProviderCall.Purpose.TEST,
        )
        return Response(
            s.TestConnectionResultSerializer(
                {"ok": True, "model": result.model, "latency_ms": result.latency_ms, "reply": result.text[:100]}
            ).data
        )


class DebugRequestsView(APIView):
    @extend_schema(responses=s.ProviderCallSerializer(many=True), tags=["settings"])
    def get(self, request):
        calls = ProviderCall.objects.filter(user=request.user).order_by("-created_at", "-id")[:DEBUG_LOG_SIZE]
        return Response(s.ProviderCallSerializer(calls, many=True).data)
