"""The bridge itself: state, the tools/call pipeline, approvals, the runner thread and start-up."""
