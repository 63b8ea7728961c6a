"""Retakes: what a pass depends on (its key), the Retakes node's cache, a pass's own prompt on its conditioning."""
