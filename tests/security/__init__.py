"""tests/security: attacker suites, one file per surface attacked."""
