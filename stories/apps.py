from django.apps import AppConfig


class StoriesConfig(AppConfig):
    name = "stories"
    verbose_name = "Stories"

    def ready(self):
        from config.admin_site import provide_login_throttle
        from stories.accounts import auth  # connects the failed-login counter

        provide_login_throttle(form_mixin=auth.ThrottledFormMixin, throttled_response=auth.throttled_response)
