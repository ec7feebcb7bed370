"""The wire protocol of pfl-server and the SDK client: one definition both sides import.

Dependencies point server -> sdk, so it lives here; the SDK never imports ``pflkit.server``.
"""

from __future__ import annotations

MAX_ID = 2**31 - 1  # client, run, token ids and round numbers fit a 32-bit signed column

# A refusal the client may simply repeat carries this header (seconds to wait), whatever its
# status: 429 and 503 always may, a 409 only when the server sets it (e.g. an enrollment that
# lost a race for a client id; the token is still valid).
RETRY_AFTER = "Retry-After"
