"""tests/support: modules the tests share (no tests here)."""
