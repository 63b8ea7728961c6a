"""Retakes: what a pass depends on (its key), the Retakes node's cache, a run's retake chain."""
