from django.apps import AppConfig

from runs import ports


class AutomationsConfig(AppConfig):
    name = "automations"
    verbose_name = "Automations (schedules and triggers)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from automations.links import source_link

        # A trace names the schedule or trigger that started its run.
        ports.source_link.fill(source_link)
