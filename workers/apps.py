from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    verbose_name = "Worker pool"

    def ready(self):
        """Provide what config's wiring reaches the pool through: the senders behind config.jobs
        (the one door for memory work), the heartbeats /healthz reads, and the heartbeat step of
        every worker this process starts (ready runs before a worker builds its steps), and the
        connection kept across tasks."""
        from config import health, jobs
        from config.celery import app
        from workers import connections, heartbeat, tasks

        jobs.provide(jobs.STORY_PASS, tasks.send_post_turn)
        jobs.provide(jobs.AGENT_PASS, tasks.send_agent_pass)
        jobs.provide(jobs.IMPORT, tasks.send_import)
        health.provide_heartbeats(heartbeat.heartbeats_read)
        app.steps["worker"].add(heartbeat.Heartbeat)
        connections.connect()  # a task's database connection kept for the next, as a request's is
