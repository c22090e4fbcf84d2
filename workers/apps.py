from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Worker pool"

    def ready(self):
        """Provide the senders behind config.jobs, the one door for memory work."""
        from config import jobs
        from workers import tasks

        jobs.provide(jobs.STORY_PASS, tasks.send_post_turn)
        jobs.provide(jobs.AGENT_PASS, tasks.send_agent_pass)
        jobs.provide(jobs.IMPORT, tasks.send_import)
