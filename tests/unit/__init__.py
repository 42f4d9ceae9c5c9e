"""The unit layer: pure modules, no sockets, no threads, no processes."""
