"""tests/integration: a real bridge on port 0 over HTTP, in this process."""
