"""``python -m gptgate``: the same as the ``gptgate`` command."""

from .cli import main

raise SystemExit(main())
