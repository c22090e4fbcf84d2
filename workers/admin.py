from django.contrib import admin

from workers.models import ParkedJob


@admin.register(ParkedJob)
class ParkedJobAdmin(admin.ModelAdmin):
    list_display = ("parked_at", "task_name", "args", "attempts", "reason")
    search_fields = ("task_name",)
    readonly_fields = [f.name for f in ParkedJob._meta.fields]
