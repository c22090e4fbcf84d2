from django.contrib import admin

from config.admin_site import ModeratedAdmin
from workers.models import ParkedJob


@admin.register(ParkedJob)
class ParkedJobAdmin(ModeratedAdmin):
    list_display = ("parked_at", "task_name", "args", "attempts", "reason")
    search_fields = ("task_name",)
    readonly_fields = [f.name for f in ParkedJob._meta.fields]
