from django.apps import AppConfig


class EvalsConfig(AppConfig):
    name = "evals"
    verbose_name = "Evaluations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from evals.links import report_url
        from runs import ports

        # A trace of an evaluation run links back to its report.
        ports.eval_report_url.fill(report_url)
