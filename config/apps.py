from django.apps import AppConfig


class ConfigAppConfig(AppConfig):
    """Operations: health checks and the commands that run the site."""

    name = "config"
    label = "config"
    verbose_name = "Site operations"
