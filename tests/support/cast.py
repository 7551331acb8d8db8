"""The fixed cast's words: what every suite types, sends and connects with.

Standard library only, so the Django-free engine tests and the scripted model
process may import it too. The cast itself (alice, bob, operator, admin) is the
demo seed, made by the ``demo`` fixture.
"""

from __future__ import annotations

#: Every seeded user's password (the ``demo`` fixture sets it).
PASSWORD = "test-password-1234"
#: The demo question: ``RedisScript`` answers it with search, calculate, answer.
QUESTION = "项目笔记里哪个方案提到 Redis？找到其中的预算表达式并计算总和。"
#: The follow-up that adds 12 to the previous answer.
FOLLOW_UP = "刚才的总和再加 12 是多少？"
#: ``send_email`` arguments the approval tests ask for.
EMAIL = {"to": "ops@example.com", "subject": "report", "body": "The weekly report."}
#: How the demo's ``send_email`` previews ``EMAIL`` (its ``preview_template``).
EMAIL_PREVIEW = f"Send email to {EMAIL['to']} — subject: {EMAIL['subject']}"
#: ``create_ticket`` arguments.
TICKET = {"title": "Cache", "body": "Move the hot queries to Redis."}
#: The ``Origin`` header of a websocket from the site itself.
ORIGIN = (b"origin", b"http://127.0.0.1:8000")
#: ``EMAIL`` as an approver edits it before approving.
EDITED_EMAIL = {**EMAIL, "subject": "Weekly"}
#: What ``search_notes`` finds for "Redis": the note with the budget expression.
REDIS_NOTES = [
    {
        "title": "缓存改造",
        "content": "使用 Redis 缓存热点查询，预算表达式为 128 * 6 + 320。",
    }
]
