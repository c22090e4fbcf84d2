from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from config.health import healthz, livez

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("healthz/live", livez, name="livez"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("api/", include("play.urls")),
    path("api/", include("memory.story.urls")),
    path("api/", include("memory.agents.agent_urls")),
    path("api/admin/workers/", include("workers.urls")),
    path("", include("play.web_urls")),
]

handler404 = "config.api_errors.api_not_found"
handler500 = "config.api_errors.api_server_error"
