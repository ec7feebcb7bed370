"""The wire protocol of pfl-server and the SDK client: one definition both sides import.

Dependencies point server -> sdk, so it lives here; the SDK never imports ``pflkit.server``.
"""

from __future__ import annotations

MAX_ID = 2**31 - 1  # client, run, token ids and round numbers fit a 32-bit signed column

# A refusal the client may simply repeat carries this header (seconds to wait), whatever its
# status: 429 and 503 always may, a 409 only when the server sets it (e.g. an enrollment that
# lost a race for a client id; the token is still valid).
RETRY_AFTER = "Retry-After"

# An upload's safetensors metadata may hold its training metrics under this key, as a JSON
# object of at most MAX_METRICS names (each at most MAX_METRIC_NAME characters) to finite
# numbers; anything else is refused with 400.
METRICS_KEY = "metrics"
MAX_METRICS = 64
MAX_METRIC_NAME = 64

MAX_QUERY_BYTES = 2**20  # JSON body of an algorithm query (POST /v1/runs/{id}/queries/{name})
