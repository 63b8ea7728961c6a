"""LONGMEDIA_PROBES: the one place the product reads which diagnostics to switch on (docs/USER_GUIDE.md).

    LONGMEDIA_PROBES=nan,weights python main.py      # or "all"; unset or empty: no probes (the default)

"nan" names the first streamed stage whose packed sequence holds NaN or inf, "weights" counts where the held
weights came from (`execution/probes.py`). Findings go to ComfyUI's log as they happen, and every line the
probes saw goes into the run report (`RunReport.probes`), which a user can paste into a bug report.
"""

from __future__ import annotations

import logging
import os
from typing import Mapping

from ..execution.probes import Observers, probe_names, probes_named

ENV_VAR = "LONGMEDIA_PROBES"


def _log(line: str) -> None:
    logging.warning("LongMedia: %s", line)


def probes_from_env(environ: Mapping[str, str] | None = None) -> Observers | None:
    """The probes LONGMEDIA_PROBES names, composed; None when it is unset or empty."""
    names = probe_names((os.environ if environ is None else environ).get(ENV_VAR, ""))
    return probes_named(names, say=_log) if names else None
