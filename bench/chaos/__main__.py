"""``python -m bench.chaos`` (``make chaos``)."""

from __future__ import annotations

import sys

from bench.chaos.cli import main

sys.exit(main())
