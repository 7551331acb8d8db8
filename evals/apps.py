from django.apps import AppConfig

from evals.links import from_run_url, report_url
from runs import ports


class EvalsConfig(AppConfig):
    name = "evals"
    verbose_name = "Evaluations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A trace of an evaluation run links back to its report.
        ports.eval_report_url.fill(report_url)
        # A trace offers to make its run a case ("Add to suite").
        ports.add_to_suite_url.fill(from_run_url)
