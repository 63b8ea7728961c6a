"""`python -m longmedia plan ...`: see longmedia.cli."""

from .cli import main

raise SystemExit(main())
