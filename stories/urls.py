from django.urls import path

from stories import api

A = "adventures/<int:adventure_id>/"

urlpatterns = [
    path("auth/signup/", api.SignupView.as_view(), name="signup"),
    path("auth/login/", api.LoginView.as_view(), name="login"),
    path("auth/logout/", api.LogoutView.as_view(), name="logout"),
    path("auth/me/", api.MeView.as_view(), name="me"),
    path("auth/password/", api.PasswordView.as_view(), name="password"),
    path("settings/", api.SettingsView.as_view(), name="settings"),
    path("settings/test/", api.SettingsTestView.as_view(), name="settings-test"),
    path("debug/requests/", api.DebugRequestsView.as_view(), name="debug-requests"),
    path("adventures/", api.AdventureListView.as_view(), name="adventures"),
    path("adventures/import/", api.AdventureImportView.as_view(), name="adventure-import"),
    path(A, api.AdventureDetailView.as_view(), name="adventure"),
    path(A + "export/", api.AdventureExportView.as_view(), name="adventure-export"),
    path(A + "story/", api.StoryView.as_view(), name="story"),
    path(A + "turns/", api.TurnView.as_view(), name="turns"),
    path(A + "retry/", api.RetryView.as_view(), name="retry"),
    path(A + "undo/", api.UndoView.as_view(), name="undo"),
    path(A + "insights/", api.InsightsView.as_view(), name="insights"),
    path(A + "actions/<int:action_id>/", api.ActionView.as_view(), name="action"),
    path(A + "actions/<int:action_id>/takes/", api.TakesView.as_view(), name="takes"),
    path(A + "actions/<int:action_id>/fork/", api.ForkView.as_view(), name="fork"),
    path(A + "branches/", api.BranchListView.as_view(), name="branches"),
    path(A + "branches/<int:branch_id>/", api.BranchDetailView.as_view(), name="branch"),
    path(A + "branches/<int:branch_id>/checkout/", api.BranchCheckoutView.as_view(), name="branch-checkout"),
    path(A + "cards/", api.CardListView.as_view(), name="cards"),
    path(A + "cards/import/", api.CardImportView.as_view(), name="cards-import"),
    path(A + "cards/export/", api.CardExportView.as_view(), name="cards-export"),
    path(A + "cards/<int:card_id>/", api.CardDetailView.as_view(), name="card"),
]
