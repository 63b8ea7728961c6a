"""LONGMEDIA_JOB: what Setup hands to the Sampler, Hi-Res and Refiner (frozen, no hidden state).

ComfyUI's normal caching decides reuse: a job is a value, rebuilt whenever Setup's inputs change.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..h3.geometry import Geometry
from ..segments.prompts import SegmentPrompts
from ..segments.timeline import SegmentPlan


@dataclass(frozen=True)
class LongMediaJob:
    """The job as Setup resolved it.

    geometry: the packed sequence of one pass (the longest, when segmented), with reference caps applied.
    segments: the fixed-segment plan when the job is longer than one pass, else None.
    family: t2va / fl2va / ref2va.
    reference_budget: low / medium / high / max (the caps are in geometry.reference_budget).
    notes: what Setup changed or capped, in plain words (snapped sizes, trimmed references).
    prompts: every segment's prompt and CONDITIONING when Setup's segment_prompts gave them, else None.
    """

    geometry: Geometry
    family: str = "t2va"
    reference_budget: str = "low"
    segments: SegmentPlan | None = None
    notes: tuple[str, ...] = ()
    prompts: SegmentPrompts | None = None

    @property
    def segmented(self) -> bool:
        return self.segments is not None and self.segments.count > 1

    def to_dict(self) -> dict:
        return {"kind": "job", "geometry": self.geometry.to_dict(), "family": self.family, "reference_budget": self.reference_budget,
                "segments": self.segments.to_dict() if self.segments is not None else None,
                "notes": list(self.notes), "prompts": self.prompts.to_dict() if self.prompts is not None else None}
