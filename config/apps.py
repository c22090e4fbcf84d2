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
        _text_fields_take_strings_only()


def _text_fields_take_strings_only():
    """DRF turns a JSON number sent for a text field into its digits; the schema
    says string, so here a number (or any non-string) for text is a 400. Query
    parameters are always strings and are unaffected."""
    from rest_framework import serializers

    original = serializers.CharField.to_internal_value
    if getattr(original, "strings_only", False):
        return

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return original(self, data)

    to_internal_value.strings_only = True
    serializers.CharField.to_internal_value = to_internal_value
