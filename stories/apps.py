from django.apps import AppConfig


class StoriesConfig(AppConfig):
    name = "stories"
    verbose_name = "Stories"

    def ready(self):
        from stories import auth  # noqa: F401  (connects the failed-login counter)
