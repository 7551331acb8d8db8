from __future__ import annotations

from celery import shared_task

from feedback.judges import judge_sampled


@shared_task(name="feedback.judge_sampled")
def judge_online() -> int:
    """Online scores: judge the sampled finished runs (the beat, every minute)."""
    return judge_sampled()
