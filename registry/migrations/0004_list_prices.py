"""List prices of common models (USD per million tokens), as published in 2025.

Create-if-missing: a price an operator already entered or edited is never
overwritten, and the admin (Admin → Model prices) edits these like any other.
The bundled local model costs nothing.
"""

from decimal import Decimal

from django.db import migrations

OPENAI = "OpenAI list price, 2025"
ANTHROPIC = "Anthropic list price, 2025 (cached = cache read)"

#: (pattern, input, cached input, output, note)
PRICES = [
    ("gpt-4o*", "2.50", "1.25", "10.00", OPENAI),
    ("gpt-4o-2024-05-13", "5.00", None, "15.00", OPENAI),
    ("gpt-4o-mini*", "0.15", "0.075", "0.60", OPENAI),
    ("gpt-4.1*", "2.00", "0.50", "8.00", OPENAI),
    ("gpt-4.1-mini*", "0.40", "0.10", "1.60", OPENAI),
    ("gpt-4.1-nano*", "0.10", "0.025", "0.40", OPENAI),
    ("o1*", "15.00", "7.50", "60.00", OPENAI),
    ("o1-mini*", "1.10", "0.55", "4.40", OPENAI),
    ("o3*", "2.00", "0.50", "8.00", OPENAI),
    ("o3-mini*", "1.10", "0.55", "4.40", OPENAI),
    ("o3-pro*", "20.00", None, "80.00", OPENAI),
    ("o4-mini*", "1.10", "0.275", "4.40", OPENAI),
    ("claude-3-5-sonnet*", "3.00", "0.30", "15.00", ANTHROPIC),
    ("*claude-3.5-sonnet*", "3.00", "0.30", "15.00", ANTHROPIC),
    ("claude-3-7-sonnet*", "3.00", "0.30", "15.00", ANTHROPIC),
    ("*claude-3.7-sonnet*", "3.00", "0.30", "15.00", ANTHROPIC),
    ("claude-sonnet-4*", "3.00", "0.30", "15.00", ANTHROPIC),
    ("*claude-sonnet-4*", "3.00", "0.30", "15.00", ANTHROPIC),
    ("claude-3-haiku*", "0.25", "0.03", "1.25", ANTHROPIC),
    ("claude-3-5-haiku*", "0.80", "0.08", "4.00", ANTHROPIC),
    ("*claude-3.5-haiku*", "0.80", "0.08", "4.00", ANTHROPIC),
    ("claude-haiku-4*", "1.00", "0.10", "5.00", ANTHROPIC),
    ("*claude-haiku-4*", "1.00", "0.10", "5.00", ANTHROPIC),
    ("claude-opus-4*", "15.00", "1.50", "75.00", ANTHROPIC),
    ("claude-opus-4-5*", "5.00", "0.50", "25.00", ANTHROPIC),
    (
        "qwen2.5-coder-1.5b-instruct*",
        "0",
        "0",
        "0",
        "The bundled local model: it runs on this machine.",
    ),
]


def add_prices(apps, schema_editor):
    price_model = apps.get_model("registry", "ModelPrice")
    for pattern, input_price, cached, output, note in PRICES:
        price_model.objects.get_or_create(
            pattern=pattern,
            defaults={
                "input_usd_per_m": Decimal(input_price),
                "cached_input_usd_per_m": Decimal(cached) if cached else None,
                "output_usd_per_m": Decimal(output),
                "note": note,
            },
        )


class Migration(migrations.Migration):
    dependencies = [
        ("registry", "0003_costs_and_routing"),
    ]

    operations = [
        migrations.RunPython(add_prices, migrations.RunPython.noop),
    ]
