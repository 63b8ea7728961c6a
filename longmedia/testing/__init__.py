"""Test support: tiny random-weight H3 checkpoints and a clean-room H3 block."""
