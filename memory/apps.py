from django.apps import AppConfig
from django.core import checks


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory"

    def ready(self):
        from memory.story import sync  # noqa: F401  (connects the tree signals)

        checks.register(agent_recall_settings, checks.Tags.compatibility)


def agent_recall_settings(app_configs=None, **kwargs):
    """settings.AGENT_RECALL names only recall's weights and knobs, each with its type (memory.E001)."""
    from django.conf import settings

    from memory.agents.agent_recall_conf import recall_conf_problems

    return [
        checks.Error(problem, hint="fix the key or its value in config/settings.py", id="memory.E001")
        for problem in recall_conf_problems(settings.AGENT_RECALL)
    ]
