"""Durations in the words every page uses.

The same words as the live pages' ticking clocks (``relative`` in
``static/js/approvals.js``), so an age rendered on the server, one kept current
in the browser and a wait named in an error message read alike.
"""

from __future__ import annotations


def duration_words(seconds: int) -> str:
    """``40 s``, ``12 min``, ``3 h 5 min``, ``2 days``."""
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    hours = minutes // 60
    if hours < 48:
        return f"{hours} h {minutes % 60} min"
    return f"{hours // 24} days"
