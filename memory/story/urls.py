from django.urls import path

from memory.story import api

A = "adventures/<int:adventure_id>/"

urlpatterns = [
    path(A + "memories/", api.MemoryListView.as_view(), name="memories"),
    path(A + "cast/", api.CastView.as_view(), name="cast"),
    path(A + "memories/run/", api.MemoryRunView.as_view(), name="memories-run"),
    path(A + "memories/<int:memory_id>/", api.MemoryDetailView.as_view(), name="memory"),
    path(A + "memories/<int:memory_id>/source/", api.MemorySourceView.as_view(), name="memory-source"),
    path(A + "memories/<int:memory_id>/regenerate/", api.MemoryRegenerateView.as_view(), name="memory-regenerate"),
    path(A + "summary/", api.SummaryView.as_view(), name="summary"),
    path(A + "summary/regenerate/", api.SummaryRegenerateView.as_view(), name="summary-regenerate"),
]
