"""A typed client of pfl-server's admin API (tokens, clients, runs), used by ``pfl-admin``.

It imports only httpx, pydantic and the API's own response models
(:mod:`pflkit.server.api.schemas`), so an operator's laptop with the base install can drive a
server: no FastAPI, SQLAlchemy or PyTorch. Every failure is an :class:`AdminError` with a
one-line message (server unreachable, 401 wrong admin token, 404 unknown client or run, 409,
422 with the server's detail), which the CLI prints instead of a traceback.
"""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from pflkit.sdk.protocol import one_line_detail
from pflkit.server.api.schemas import ClientPublic, PrunePublic, RunPublic, TokenPublic

API = "/v1"
Reply = TypeVar("Reply", bound=BaseModel)


PASSING = (502, 503, 504)  # the server (or its proxy) cannot answer now: asking again may work


class AdminError(RuntimeError):
    """A refused or failed admin request; ``status`` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def passing(self) -> bool:
        """Whether the request may work if asked again: no answer, or a passing failure.

        503: the server's database or disk fails for now; 502 / 504: a reverse proxy found
        no server. Any other status is a refusal.
        """
        return self.status is None or self.status in PASSING


class AdminClient:
    """Admin operations over HTTP with the admin token as Bearer credentials."""

    def __init__(self, url: str, token: str, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url + API, timeout=timeout,
                                  headers={"Authorization": f"Bearer {token}"})

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # -- enrollment tokens and clients ---------------------------------------------------

    def create_token(self, client_id: int | None = None, ttl_seconds: float | None = None
                     ) -> TokenPublic:
        """Issue a one-time enrollment token, optionally reserving ``client_id``."""
        body = {"client_id": client_id, "ttl_seconds": ttl_seconds}
        return _parse(TokenPublic, self._call("POST", "/enrollment-tokens", json=body))

    def revoke_token(self, token_id: int) -> None:
        """Make an unused enrollment token useless."""
        self._call("DELETE", f"/enrollment-tokens/{token_id}")

    def clients(self) -> list[ClientPublic]:
        """Every enrolled client, revoked ones included."""
        return [_parse(ClientPublic, row) for row in self._call("GET", "/clients")]

    def revoke_client(self, client_id: int) -> None:
        """Revoke a client: its secret stops working and it leaves future samples."""
        self._call("POST", f"/clients/{client_id}/revoke")

    # -- runs ------------------------------------------------------------------------------

    def create_run(self, config_toml: str) -> RunPublic:
        """Create a run from a pfl-sim TOML config (the server validates it: 422 if bad)."""
        return _parse(RunPublic, self._call("POST", "/runs", json={"config_toml": config_toml}))

    def run(self, run_id: int | None = None) -> RunPublic:
        """Status and progress of a run (None: the newest)."""
        path = "/runs/current" if run_id is None else f"/runs/{run_id}"
        return _parse(RunPublic, self._call("GET", path))

    def transition(self, action: str, run_id: int | None = None) -> RunPublic:
        """``pause``, ``resume`` or ``stop`` a run (None: the newest)."""
        if run_id is None:
            run_id = self.run().id
        return _parse(RunPublic, self._call("POST", f"/runs/{run_id}/{action}"))

    def prune(self, keep_globals: int | None = None, dry_run: bool = False) -> PrunePublic:
        """Delete the blobs no round can need again (server/retention.py)."""
        body = {"keep_globals": keep_globals, "dry_run": dry_run}
        return _parse(PrunePublic, self._call("POST", "/runs/prune", json=body))

    # -- transport -------------------------------------------------------------------------

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        try:
            reply = self._http.request(method, path, json=json)
        except httpx.LocalProtocolError as err:  # its message may quote the token's header
            raise AdminError(f"cannot send the request to {self.url} "
                             f"({type(err).__name__})") from None
        except httpx.TransportError as err:
            reason = str(err) or type(err).__name__
            raise AdminError(f"cannot reach the server at {self.url}: {reason}") from None
        if reply.status_code >= 400:
            raise AdminError(self._refusal(reply), reply.status_code)
        if reply.status_code == 204 or not reply.content:
            return None
        try:
            return reply.json()
        except ValueError:
            raise AdminError(f"{method} {path}: the server's answer is not JSON "
                             f"(is {self.url} a pfl-server?)", reply.status_code) from None

    def _refusal(self, reply: httpx.Response) -> str:
        try:
            detail = one_line_detail(reply.json())
        except ValueError:
            detail = " ".join(reply.text.split())[:200] or reply.reason_phrase
        if reply.status_code == 401:
            return f"the server refused the admin token (401: {detail})"
        return f"the server answered {reply.status_code}: {detail}"


def _parse(model: type[Reply], data: Any) -> Reply:
    """Validate an answer against its model; a mismatch is an :class:`AdminError`."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise AdminError(f"unexpected answer from the server: {err.errors()[0]['msg']}") from None
