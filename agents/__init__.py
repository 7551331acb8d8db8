"""History only: see apps.py."""
