import gc

from django.apps import AppConfig

# The collector's young generation is collected once this many objects were made and not freed (Python's
# default: 700). A turn makes tens of thousands (rows, model objects, a prompt's pieces, the relay's
# events): at 700 the young collections were ~7% of a turn's CPU (bench/turn.py in one process: 0.78 s
# of 11.4 CPU s, 748 collections for 60 turns); at 20,000, 0.22 s of 9.6 (25 collections; set before the imports). What waits
# for a collection so is a few MB at most.
YOUNG_COLLECTED_AFTER = 20_000
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
        # every process of the site (web, workers, commands): fewer young collections
        gc.set_threshold(YOUNG_COLLECTED_AFTER, 10, 10)
        # registers guards_in_place with the system checks (`manage.py check --deploy` loads no middleware)
        from config import loop_middleware  # noqa: F401
