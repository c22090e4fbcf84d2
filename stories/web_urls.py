from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.decorators.csrf import ensure_csrf_cookie

from stories import web

urlpatterns = [
    path("", web.home, name="web-home"),
    path("accounts/login/", web.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/signup/", web.signup, name="web-signup"),
    path("play/", ensure_csrf_cookie(web.adventures), name="web-adventures"),
    path("play/<int:adventure_id>/", ensure_csrf_cookie(web.play), name="web-play"),
    path("play/<int:adventure_id>/delete/", web.adventure_delete, name="web-adventure-delete"),
    path("settings/", ensure_csrf_cookie(web.settings_page), name="web-settings"),
]
