from django.apps import AppConfig


class PlayConfig(AppConfig):
    """The player's use cases (a turn, history, changes) and every HTTP edge of the story site: the
    API, the pages, their templates and static files. No models."""

    name = "play"
    verbose_name = "Play"

    def ready(self):
        from play import live
        from stories.party import members
        from stories.tree.signals import head_moved, story_rewritten

        story_rewritten.connect(live.on_tree_changed, dispatch_uid="play.live.story_rewritten")
        members.access_changed.connect(live.on_access_changed, dispatch_uid="play.live.access_changed")
        head_moved.connect(live.on_tree_changed, dispatch_uid="play.live.head_moved")
