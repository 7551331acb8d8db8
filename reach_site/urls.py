from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from accounts import views as accounts_views
from approvals import api as approvals_api
from approvals import views as approvals_views
from audit import api as audit_api
from automations import api as automations_api
from effects import api as effects_api
from evals import api as evals_api
from evals import views as evals_views
from feedback import api as feedback_api
from feedback import views as feedback_views
from memory import api as memory_api
from memory import views as memory_views
from reach_site.health import healthz
from reach_site.metrics import metrics
from registry import api as registry_api
from runs import views as chat
from runs.api import stream
from runs.api import views as api
from traces import api as traces_api
from traces import views as traces_views

api_patterns = [
    path("agents/", registry_api.AgentList.as_view()),
    path("tools/", registry_api.ToolList.as_view()),
    path("tools/<str:name>/versions/", registry_api.ToolVersions.as_view()),
    path("notes/", effects_api.NoteList.as_view()),
    path("conversations/", api.ConversationList.as_view()),
    path("conversations/<uuid:conversation_id>/", api.ConversationDetail.as_view()),
    path(
        "conversations/<uuid:conversation_id>/messages/",
        api.ConversationMessages.as_view(),
    ),
    path(
        "conversations/<uuid:conversation_id>/queue/",
        api.ConversationQueue.as_view(),
    ),
    path("tasks/", api.TaskList.as_view()),
    path("tasks/<uuid:task_id>/", api.TaskDetail.as_view()),
    path("tasks/<uuid:task_id>/steps/", api.TaskSteps.as_view()),
    path("tasks/<uuid:task_id>/events/", stream.TaskEvents.as_view()),
    path("tasks/<uuid:task_id>/cancel/", api.TaskCancel.as_view()),
    path("tasks/<uuid:task_id>/trace/", traces_api.TaskTrace.as_view()),
    path("tasks/<uuid:task_id>/rerun/", traces_api.TaskRerun.as_view()),
    path("tasks/<uuid:task_id>/fork/", traces_api.TaskFork.as_view()),
    path("tasks/<uuid:task_id>/feedback/", feedback_api.TaskFeedback.as_view()),
    path("tasks/<uuid:task_id>/label/", feedback_api.TaskLabel.as_view()),
    path("feedback/", feedback_api.MyFeedback.as_view()),
    path("review/queue/", feedback_api.ReviewQueue.as_view()),
    path("review/labels/", feedback_api.LabelList.as_view()),
    path("traces/import/", traces_api.TraceImport.as_view()),
    path("audit/", audit_api.AuditLog.as_view()),
    path("triggers/<uuid:trigger_id>/", automations_api.TriggerFire.as_view()),
    path("evals/", evals_api.EvalList.as_view()),
    path("evals/<uuid:report_id>/", evals_api.EvalDetail.as_view()),
    path("evals/suites/<str:name>/runs/", evals_api.SuiteRuns.as_view()),
    path("memories/", memory_api.MemoryList.as_view()),
    path("memories/<uuid:memory_id>/", memory_api.MemoryDetail.as_view()),
    path("approvals/", approvals_api.ApprovalList.as_view()),
    path(
        "approvals/<uuid:approval_id>/decision/",
        approvals_api.ApprovalDecisionView.as_view(),
    ),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI from the sidecar's static files, its start-up script a separate
    # request (``?script=``): the page loads from this host alone, under the CSP.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
]

urlpatterns = [
    path("", chat.chat, name="chat"),
    path("c/<uuid:conversation_id>/", chat.chat, name="conversation"),
    path("c/new/", chat.conversation_new, name="conversation-new"),
    path("accounts/login/", accounts_views.ReachLoginView.as_view(), name="login"),
    path("accounts/login/code/", accounts_views.login_code, name="login-code"),
    path("accounts/two-factor/", accounts_views.two_factor, name="two-factor"),
    path("accounts/sessions/", accounts_views.sessions, name="sessions"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Single sign-on (sso/): off to the provider and back; 404 when not configured.
    path("oidc/", include("sso.urls")),
    path("approvals/", approvals_views.queue, name="approvals"),
    path("approvals/history/", approvals_views.history, name="approvals-history"),
    # The page a mailed decision link opens (approvals.links).
    path(
        "approvals/<uuid:approval_id>/confirm/",
        approvals_views.confirm,
        name="approval-confirm",
    ),
    path("approvals/away/", approvals_views.away, name="approvals-away"),
    path("console/", include("console.urls")),
    path("schedules/", include("automations.urls")),
    path("evals/", evals_views.eval_list, name="evals"),
    path("evals/<uuid:report_id>/", evals_views.eval_detail, name="eval"),
    path(
        "evals/<uuid:report_id>/promote/",
        evals_views.eval_promote,
        name="eval-promote",
    ),
    path(
        "evals/from-run/<uuid:task_id>/",
        evals_views.eval_from_run,
        name="eval-from-run",
    ),
    path("evals/from-runs/", evals_views.eval_from_runs, name="eval-from-runs"),
    path("memory/", memory_views.memory_list, name="memory"),
    path("memory/add/", memory_views.memory_add, name="memory-add"),
    path("memory/<uuid:memory_id>/edit/", memory_views.memory_edit, name="memory-edit"),
    path(
        "memory/<uuid:memory_id>/delete/",
        memory_views.memory_delete,
        name="memory-delete",
    ),
    path("review/", feedback_views.review_queue, name="review"),
    path(
        "review/<uuid:task_id>/label/", feedback_views.review_label, name="review-label"
    ),
    path("review/labels.jsonl", feedback_views.review_export, name="review-export"),
    path("traces/", traces_views.trace_list, name="traces"),
    path("traces/stats/", traces_views.trace_stats, name="trace-stats"),
    path("traces/<uuid:task_id>/", traces_views.trace_detail, name="trace"),
    path("admin/", admin.site.urls),
    path("integrations/", include("notify.urls")),
    path("api/", include(api_patterns)),
    path("healthz", healthz),
    path(
        "favicon.ico",
        RedirectView.as_view(url=static("favicon.svg"), permanent=True),
    ),
    path("metrics", metrics),
]

# A path under /api/ that matches no route answers JSON, like every other refusal.
handler404 = "infra.api.errors.not_found"
