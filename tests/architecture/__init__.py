"""tests/architecture: boundaries, lint, types, packaging, docs."""
