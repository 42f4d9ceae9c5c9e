"""The integration layer: a real bridge on port 0 over real HTTP."""
