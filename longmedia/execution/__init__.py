"""The exact streamed H3 block executor, its memory formula and its guards."""
