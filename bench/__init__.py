"""The lab wing: benches that measure the product, each a command run from the repository root
(`python -m bench.<name> --smoke`; CI runs every one). Single-question benches are single files; the card
bench is the `bench.cards` package. Nothing here is shipped in the pack, and nothing here reaches into the
product's private names: diagnostics enter through `longmedia.execution.probes` and the `weights=` parameters.
"""
