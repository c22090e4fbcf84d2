from django.core.management.base import BaseCommand
from django.db import transaction
from tqdm import tqdm

from stories.accounts import crypto
from stories.models import AISettings


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored API key under the first FIELD_ENCRYPTION_KEYS key. Run it after putting a new "
        "key first; once it finishes, the old keys can be removed."
    )

    def handle(self, *args, **options):
        ids = list(AISettings.objects.exclude(api_key_encrypted="").values_list("pk", flat=True))
        failed = 0
        for pk in tqdm(ids, desc="re-encrypting API keys", unit="key", disable=not ids):
            with transaction.atomic():
                row = AISettings.objects.select_for_update().get(pk=pk)
                try:
                    row.api_key_encrypted = crypto.rotate(row.api_key_encrypted)
                except crypto.SecretUnreadable:
                    failed += 1
                    continue
                row.save(update_fields=["api_key_encrypted"])
        self.stdout.write(f"re-encrypted {len(ids) - failed} keys; {failed} could not be read with any key")
