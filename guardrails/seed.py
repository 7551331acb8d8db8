"""The demo's guardrail and structured-answer agent (reach_site.demo.seed_demo)."""

from __future__ import annotations

from typing import Any

from guardrails.models import Guardrail
from registry.models import Agent

#: The demo assistant never shows its model a pasted card number.
DEMO_GUARDRAIL: dict[str, Any] = {
    "name": "card-numbers",
    "kind": Guardrail.Kind.PERSONAL_DATA,
    "stage": Guardrail.Stage.INPUT,
    "action": Guardrail.Action.REDACT,
    "config": {"types": ["card_number"]},
}

EXTRACTOR_INSTRUCTIONS = (
    "You answer questions about the team's project notes as JSON. Use "
    "search_notes to find the notes and calculate for every calculation. Your "
    "final answer is only the JSON object the schema asks for, its text in the "
    "user's language."
)
#: The extractor's final answer: the plans a question is about, as rows.
EXTRACTOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "plans": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "plan": {"type": "string"},
                    "budget": {"type": "number"},
                },
                "required": ["plan", "budget"],
            },
        },
    },
    "required": ["summary", "plans"],
}


def seed_demo_guardrails(*, assistant: Agent | None) -> list[str]:
    """Create what is missing; never overwrite an operator's edits."""
    created: list[str] = []
    if assistant is not None and not Guardrail.objects.filter(agent=assistant).exists():
        Guardrail.objects.create(agent=assistant, **DEMO_GUARDRAIL)
        created.append(f"guardrail {assistant.name}/{DEMO_GUARDRAIL['name']}")
    if not Agent.objects.filter(name="extractor").exists():
        Agent.objects.create(
            name="extractor",
            description="Answers as JSON: the plans a question is about, as rows.",
            instructions=EXTRACTOR_INSTRUCTIONS,
            tool_tags=["demo"],
            answer_schema=EXTRACTOR_SCHEMA,
        )
        created.append("agent extractor")
    return created
