import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from config.env import env_str


class Command(BaseCommand):
    help = (
        "Create the first admin account if there is no superuser yet. Uses ADMIN_USERNAME, "
        "ADMIN_PASSWORD, ADMIN_EMAIL when set; otherwise prints a generated password once."
    )

    def handle(self, *args, **options):
        User = get_user_model()
        if User.objects.filter(is_superuser=True).exists():
            return
        username = env_str("ADMIN_USERNAME") or "admin"
        password = env_str("ADMIN_PASSWORD")
        generated = not password
        if generated:
            password = secrets.token_urlsafe(12)
        User.objects.create_superuser(username=username, email=env_str("ADMIN_EMAIL") or "", password=password)
        if generated:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Admin account created: username {username!r}, password {password!r}. "
                    "It is shown only this once; change it with `manage.py changepassword`."
                )
            )
        else:
            self.stdout.write(
                self.style.SUCCESS(f"Admin account created: username {username!r} (password from ADMIN_PASSWORD).")
            )
