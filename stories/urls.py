from django.urls import path

from stories import api_account, api_adventures, api_story, api_turns

A = "adventures/<int:adventure_id>/"

urlpatterns = [
    path("auth/signup/", api_account.SignupView.as_view(), name="signup"),
    path("auth/login/", api_account.LoginView.as_view(), name="login"),
    path("auth/logout/", api_account.LogoutView.as_view(), name="logout"),
    path("auth/me/", api_account.MeView.as_view(), name="me"),
    path("auth/password/", api_account.PasswordView.as_view(), name="password"),
    path("settings/", api_account.SettingsView.as_view(), name="settings"),
    path("settings/test/", api_account.SettingsTestView.as_view(), name="settings-test"),
    path("settings/presets/", api_account.SettingsPresetsView.as_view(), name="settings-presets"),
    path("settings/models/", api_account.SettingsModelsView.as_view(), name="settings-models"),
    path("debug/requests/", api_account.DebugRequestsView.as_view(), name="debug-requests"),
    path("adventures/", api_adventures.AdventureListView.as_view(), name="adventures"),
    path("adventures/import/", api_adventures.AdventureImportView.as_view(), name="adventure-import"),
    path("imports/", api_adventures.ImportListView.as_view(), name="imports"),
    path("adventures/import/character/", api_adventures.CharacterImportView.as_view(), name="import-character"),
    path("imports/<int:job_id>/", api_adventures.ImportDetailView.as_view(), name="import"),
    path(A, api_adventures.AdventureDetailView.as_view(), name="adventure"),
    path(A + "export/", api_adventures.AdventureExportView.as_view(), name="adventure-export"),
    path(A + "story/", api_story.StoryView.as_view(), name="story"),
    path(A + "turns/", api_turns.turn, name="turns"),
    path(A + "retry/", api_turns.retry, name="retry"),
    path(A + "undo/", api_story.UndoView.as_view(), name="undo"),
    path(A + "redo/", api_story.RedoView.as_view(), name="redo"),
    path(A + "story/search/", api_story.StorySearchView.as_view(), name="story-search"),
    path(A + "story/export/", api_story.StoryExportView.as_view(), name="story-export"),
    path(A + "insights/", api_story.InsightsView.as_view(), name="insights"),
    path(A + "actions/<int:action_id>/", api_story.ActionView.as_view(), name="action"),
    path(A + "actions/<int:action_id>/takes/", api_story.TakesView.as_view(), name="takes"),
    path(A + "actions/<int:action_id>/fork/", api_story.ForkView.as_view(), name="fork"),
    path(A + "branches/", api_story.BranchListView.as_view(), name="branches"),
    path(A + "branches/<int:branch_id>/", api_story.BranchDetailView.as_view(), name="branch"),
    path(A + "branches/<int:branch_id>/checkout/", api_story.BranchCheckoutView.as_view(), name="branch-checkout"),
    path(A + "cards/", api_adventures.CardListView.as_view(), name="cards"),
    path(A + "cards/import/", api_adventures.CardImportView.as_view(), name="cards-import"),
    path(A + "cards/export/", api_adventures.CardExportView.as_view(), name="cards-export"),
    path(A + "cards/import/book/", api_adventures.BookImportView.as_view(), name="cards-import-book"),
    path(A + "cards/<int:card_id>/", api_adventures.CardDetailView.as_view(), name="card"),
]
