from django.apps import AppConfig
from django.contrib.admin.apps import AdminConfig


class EverloreAdminConfig(AdminConfig):
    """Django's admin with the site's rules (config.admin_site)."""

    default_site = "config.admin_site.EverloreAdminSite"


class ConfigAppConfig(AppConfig):
    """Operations: health checks and the commands that run the site."""

    name = "config"
    label = "config"
    verbose_name = "Site operations"

    def ready(self):
        # registers guards_in_place with the system checks (`manage.py check --deploy` loads no middleware)
        from config import loop_middleware  # noqa: F401
