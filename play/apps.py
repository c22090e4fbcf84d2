from django.apps import AppConfig


class PlayConfig(AppConfig):
    """The player's use cases (a turn, history, changes) and every HTTP edge of the story site: the
    API, the pages, their templates and static files. No models."""

    name = "play"
    verbose_name = "Play"
