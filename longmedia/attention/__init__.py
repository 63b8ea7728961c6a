"""Attention backends, the dispatcher that picks one, and the Sol schedule."""
