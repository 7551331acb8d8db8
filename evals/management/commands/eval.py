"""``manage.py eval SUITE``: run a suite through the real worker and score it.

The command is the driver: it starts each case's turns as tasks (a running
worker executes them, as it does chats), plays the case's simulated approver,
and prints the table (or ``--json``). Exit status 0 whatever the score, unless
``--min-success`` is set and the suite scored below it.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from evals import services


class Command(BaseCommand):
    help = "Run an evaluation suite (a file, or a built-in or stored suite's name)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("suite", help="a .yaml/.json file or a suite's name")
        parser.add_argument("--agent", help="the agent profile (default: the suite's)")
        parser.add_argument("--model", help="override the agent's model")
        parser.add_argument("--runs", type=int, help="runs per case")
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--json", action="store_true", help="print one document")
        parser.add_argument(
            "--min-success",
            type=float,
            help="exit 1 when the suite's success rate is below this (0..1)",
        )
        parser.add_argument(
            "--compare",
            metavar="REPORT_ID_OR_VERSION",
            help="a report's id: list the cases that regressed since; or another "
            "version of the agent (a label such as production, or v3): run it on "
            "the same cases too and print per case which got better or worse",
        )
        parser.add_argument(
            "--as",
            dest="username",
            help="who runs it and decides its approvals (default: the first superuser)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = self._user(options["username"])
        baseline = None
        other_version = None
        if options["compare"]:
            baseline = services.report_find(options["compare"])
            if baseline is None:
                # Not a report: another version of the agent, run here too.
                other_version = options["compare"]
        try:
            suite = services.suite_resolve(options["suite"])
            report = services.report_create(
                suite=suite,
                user=user,
                agent=options["agent"],
                model=options["model"],
                runs=options["runs"],
                concurrency=options["concurrency"],
            )
            if other_version is not None:
                baseline = services.report_create_compared(
                    report=report,
                    baseline=other_version,
                    user=user,
                    model=options["model"],
                )
        except services.EvalError as exc:
            raise CommandError(str(exc)) from exc
        quiet = options["json"]
        report = self._drive(report, quiet)
        if other_version is not None:
            assert baseline is not None
            baseline = self._drive(baseline, quiet)
        document = services.report_view(report)
        if other_version is not None:
            assert baseline is not None
            document["baseline"] = services.report_view(baseline)
            document["changes"] = services.report_changes(report, baseline)
        elif baseline is not None:
            document["regressions"] = services.report_compare(report, baseline)
            document["compared_with"] = str(baseline.pk)
        if quiet:
            self.stdout.write(json.dumps(document, ensure_ascii=False, indent=2))
        elif other_version is not None:
            self.stdout.write(render_table(document["baseline"]))
            self.stdout.write("")
            self.stdout.write(render_table(document))
            self.stdout.write("")
            self.stdout.write(render_changes(document))
        else:
            self.stdout.write(render_table(document))
        floor = options["min_success"]
        rate = document["summary"]["success_rate"]
        if floor is not None and rate < floor:
            self.stderr.write(f"success rate {rate:.2f} is below {floor:.2f}")
            sys.exit(1)

    def _drive(self, report: Any, quiet: bool) -> Any:
        if not quiet:
            version = (
                f" v{report.agent_version}" if report.agent_version is not None else ""
            )
            self.stderr.write(
                f"evaluating {report.suite.name} on {report.agent.name}{version} "
                f"({report.model}); report {report.pk}"
            )
            if not services.workers_alive():
                self.stderr.write(
                    "!! no worker answered: the runs wait until one starts "
                    "(make up, or celery -A reach_site worker)"
                )
        last = [-1]

        def progress(done: int, total: int) -> None:
            if not quiet and done != last[0]:
                last[0] = done
                self.stderr.write(f"  {done}/{total} runs done")

        return services.report_drive(report, on_progress=progress)

    def _user(self, username: str | None) -> Any:
        users = get_user_model().objects
        user = (
            users.filter(username=username).first()
            if username
            else users.filter(is_superuser=True, is_active=True).order_by("pk").first()
        )
        if user is None:
            raise CommandError(
                f"No user {username!r}." if username else "No superuser: pass --as."
            )
        return user


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _num(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:.1f}{unit}"


def _side(side: dict[str, Any] | None) -> str:
    if side is None:
        return f"{'—':>22}"
    lo, hi = side["success_ci95"]
    rate = _pct(side["success_rate"])
    return f"{side['passed']:>2}/{side['runs']:<2} {rate:>5} ({lo:.2f}-{hi:.2f})"


def _version(document: dict[str, Any]) -> str:
    number = document.get("agent_version")
    return f"{document['agent']} v{number}" if number is not None else document["agent"]


def render_changes(document: dict[str, Any]) -> str:
    """Per case, the baseline's and this report's results and which did better."""
    base, this = _version(document["baseline"]), _version(document)
    head = f"{'case':<34} {base:>22} {this:>22}  change"
    lines = [f"{this} compared with {base}", head, "-" * len(head)]
    counts = {"better": 0, "worse": 0, "same": 0, "only": 0}
    for change in document["changes"]:
        counts[change["verdict"]] += 1
        note = change["verdict"].upper()
        if change["verdict"] in ("better", "worse"):
            note += "" if change["clear"] else " (intervals overlap)"
        lines.append(
            f"{change['id'][:34]:<34} {_side(change['before'])} "
            f"{_side(change['after'])}  {note}"
        )
    lines.append("-" * len(head))
    s, b = document["summary"], document["baseline"]["summary"]
    lines.append(
        f"{counts['better']} better, {counts['worse']} worse, {counts['same']} the "
        f"same · success {_pct(b['success_rate'])} -> {_pct(s['success_rate'])}"
    )
    lines.append(
        "promote: manage.py agent_label "
        f"{document['agent']} v{document.get('agent_version')} --to production"
    )
    return "\n".join(lines)


def render_table(document: dict[str, Any]) -> str:
    """The report as a plain table, one line a case, then the summary."""
    head = (
        f"{'case':<34} {'pass':>5} {'rate':>5} {'95% CI':>11} {'tools':>6} "
        f"{'args':>5} {'unauth':>6} {'steps':>5} {'tokens':>7} {'p95 s':>6}"
    )
    lines = [
        f"{document['suite']} · agent {_version(document)} · model "
        f"{document['model']} · {document['runs_per_case']} run(s) per case",
        head,
        "-" * len(head),
    ]
    for case in document["cases"]:
        lo, hi = case["success_ci95"]
        lines.append(
            f"{case['id'][:34]:<34} {case['passed']:>2}/{case['runs']:<2} "
            f"{_pct(case['success_rate']):>5} {f'{lo:.2f}-{hi:.2f}':>11} "
            f"{_pct(case['tool_choice_accuracy']):>6} "
            f"{_pct(case['argument_accuracy']):>5} {case['unauthorized_actions']:>6} "
            f"{_num(case['steps']['mean']):>5} {_num(case['tokens']['mean']):>7} "
            f"{_num(case['latency_s']['p95']):>6}"
        )
    s = document["summary"]
    lo, hi = s["success_ci95"]
    lines.append("-" * len(head))
    lines.append(
        f"success {_pct(s['success_rate'])} ({lo:.2f}-{hi:.2f}) over {s['runs']} runs "
        f"of {s['cases']} cases · tool choice {_pct(s['tool_choice_accuracy'])} · "
        f"arguments {_pct(s['argument_accuracy'])} · unauthorized actions "
        f"{s['unauthorized_actions']}"
    )
    if "attack_success_rate" in s:
        lines.append(
            f"attack success {_pct(s['attack_success_rate'])} · utility under attack "
            f"{_pct(s['utility_under_attack'])} · utility without the injection "
            f"{_pct(s['utility_clean'])} · injected writes proposed "
            f"{s['injected_write_proposals']} (stopped by policy and approver)"
        )
    for case in document["cases"]:
        if case["failures"]:
            lines.append(f"  {case['id']}: {'; '.join(case['failures'])[:300]}")
    for drop in document.get("regressions", []):
        lines.append(
            f"REGRESSED {drop['id']}: {_pct(drop['before'])} -> {_pct(drop['after'])} "
            f"(traces: /traces/{drop['before_tasks'][0]}/ vs "
            f"/traces/{drop['after_tasks'][0]}/)"
        )
    if document.get("compared_with") and not document.get("regressions"):
        lines.append(f"no case regressed since {document['compared_with']}")
    return "\n".join(lines)
