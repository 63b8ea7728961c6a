"""`python -m bench.long_job ...`: a long job stage by stage (see the package docstring)."""

from .entry import main

raise SystemExit(main())
