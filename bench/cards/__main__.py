"""`python -m bench.cards ...`: the card bench (see the package docstring)."""

from .entry import main

raise SystemExit(main())
