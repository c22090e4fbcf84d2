from django.urls import path

from memory.agents import agent_api as api

W = "worlds/<int:world_id>/"
AG = W + "agents/<str:agent_id>/"

urlpatterns = [
    path("worlds/", api.WorldListView.as_view(), name="worlds"),
    path("worlds/import/", api.WorldImportView.as_view(), name="world-import"),
    path(W, api.WorldDetailView.as_view(), name="world"),
    path(W + "tokens/", api.TokenListView.as_view(), name="world-tokens"),
    path(W + "tokens/<int:token_id>/", api.TokenDetailView.as_view(), name="world-token"),
    path(W + "events/", api.EventsView.as_view(), name="world-events"),
    path(W + "export/", api.WorldExportView.as_view(), name="world-export"),
    path(W + "agents/", api.AgentListView.as_view(), name="agents"),
    path(AG, api.AgentDetailView.as_view(), name="agent"),
    path(AG + "recall/", api.RecallView.as_view(), name="agent-recall"),
    path(AG + "memories/", api.AgentMemoryListView.as_view(), name="agent-memories"),
    path(AG + "memories/<int:memory_id>/", api.AgentMemoryDetailView.as_view(), name="agent-memory"),
]
