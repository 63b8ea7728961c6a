"""`python -m longmedia.testing OUT_DIR [...]`: same as `python -m longmedia.testing.tiny_h3`."""

from .tiny_h3 import main

raise SystemExit(main())
