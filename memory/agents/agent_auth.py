"""World tokens as API credentials. Only the world routes accept them, so a
world token can never reach its owner's stories or settings."""

from rest_framework import authentication, exceptions

from memory.agents import worlds
from memory.agents.worlds import TOKEN_PREFIX


class WorldTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer wt_...``: request.user is the world's owner,
    request.auth the WorldToken (views confine it to its world)."""

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode(errors="replace").split()
        if len(header) != 2 or header[0].lower() != "bearer" or not header[1].startswith(TOKEN_PREFIX):
            return None
        try:
            token = worlds.token_authenticate(header[1])
        except worlds.TokenRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        return token.world.owner, token

    def authenticate_header(self, request):
        return "Bearer"


try:
    from drf_spectacular.extensions import OpenApiAuthenticationExtension

    class WorldTokenScheme(OpenApiAuthenticationExtension):
        target_class = "memory.agents.agent_auth.WorldTokenAuthentication"
        name = "worldToken"

        def get_security_definition(self, auto_schema):
            return {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "wt_...",
                "description": "A world token (POST /api/worlds/{id}/tokens/); reaches only its world.",
            }
except ImportError:  # drf-spectacular is in requirements; this guard only keeps the module importable alone
    pass
