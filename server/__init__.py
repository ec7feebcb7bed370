"""pflkit.server: the Coordinator, the simulator that drives it, and (later) the HTTP server."""
