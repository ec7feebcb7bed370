"""The versioned HTTP API: one router module per resource, shared dependencies in ``deps``."""
