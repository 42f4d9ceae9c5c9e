"""tests/integration: a real bridge on port 0 over real HTTP, in this process."""
