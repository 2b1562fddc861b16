"""``python -m gptgate.cli``: the same as the ``gptgate`` command."""

from . import main

raise SystemExit(main())
