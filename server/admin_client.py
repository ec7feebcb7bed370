"""A typed client of pfl-server's admin API (tokens, clients, runs), used by ``pfl-admin``.

It imports only httpx, pydantic and the API's own response models
(:mod:`pflkit.server.api.schemas`), so an operator's laptop with the base install can drive a
server: no FastAPI, SQLAlchemy or PyTorch. Every failure is an :class:`AdminError` with a
one-line message (server unreachable, 401 wrong admin token, 404 unknown client or run, 409,
422 with the server's detail), which the CLI prints instead of a traceback.

The server is trusted no further than a device trusts it (sdk/transport.py): its URL must be
http(s) naming a host without ``user:password@``; an answer is read up to ``MAX_ANSWER`` bytes
(a refusal's up to ``MAX_ERROR_ANSWER``), unencoded, and must arrive whole within
``deadline`` seconds; a redirect is not followed; JSON naming a key twice is refused; and no
message shows the admin token, whatever the server quotes back.
"""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import TypeAdapter, ValidationError

from pflkit.sdk.answer_deadline import Deadline, bound_by
from pflkit.sdk.protocol import one_line_detail, sendable, server_url_problem, strict_json
from pflkit.server.api.schemas import ClientPublic, PrunePublic, RunPublic, TokenPublic

API = "/v1"
Reply = TypeVar("Reply")
MAX_ANSWER = 256 * 2**20  # bytes: a run's history of 100000 rounds, a million clients' list
MAX_ERROR_ANSWER = 64 * 2**10  # bytes of a refusal read: only its message is shown
MAX_DEADLINE = 7 * 86400  # seconds: the longest wait for a whole answer, a week


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

    def __init__(self, url: str, token: str, deadline: float = 600.0,
                 timeout: float | None = None) -> None:
        """``deadline`` bounds each whole answer (seconds), connecting included.

        ``timeout`` bounds each connect, read and write alone; None: only the deadline, so a
        server that takes as long as the operator allowed (a prune of a large data folder) is
        waited for, not given up on at a fixed stall limit.
        """
        if (problem := server_url_problem(url)) is not None:  # never quoted: it may hold a password
            raise ValueError(problem)
        self.url, self._token, self._seconds = url.rstrip("/"), token, deadline
        self._stall = timeout
        self._http = httpx.Client(base_url=self.url + API,
                                  timeout=deadline if timeout is None else timeout,
                                  headers={"Authorization": f"Bearer {token}",
                                           "Accept-Encoding": "identity"})
        self._deadline = Deadline()
        bound_by(self._http, self._deadline)

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
        token = _parse(TokenPublic, self._call("POST", "/enrollment-tokens", json=body))
        if not sendable(token.token):  # a device could not send it; it would reach a terminal
            raise AdminError("unexpected answer from the server: the enrollment token is not "
                             "printable ASCII without spaces")
        return token

    def revoke_token(self, token_id: int) -> None:
        """Make an unused enrollment token useless."""
        self._call("DELETE", f"/enrollment-tokens/{token_id}")

    def clients(self) -> list[ClientPublic]:
        """Every enrolled client, revoked ones included."""
        return _parse(list[ClientPublic], self._call("GET", "/clients"))

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
        """The answer's JSON (None: no body); any failure is a one-line :class:`AdminError`."""
        try:
            status, headers, body = self._send(method, path, json)
        except httpx.LocalProtocolError as err:  # its message may quote the token's header
            raise AdminError(f"cannot send the request to {self.url} "
                             f"({type(err).__name__})") from None
        except httpx.TransportError as err:  # its message may quote the server's bytes
            reason = one_line_detail(str(err) or type(err).__name__, (self._token,))
            raise AdminError(f"cannot reach the server at {self.url}: {reason}") from None
        if not 200 <= status < 300:
            raise AdminError(self._refusal(status, headers, body), status)
        if not body:
            return None
        try:
            return strict_json(body)
        except (ValueError, RecursionError) as err:  # strict_json's own message quotes nothing
            why = f"{err}; " if err.__class__ is ValueError else ""
            raise AdminError(f"{method} {path}: the server's answer is not JSON ({why}is "
                             f"{self.url} a pfl-server?)", status) from None

    def _send(self, method: str, path: str, json: Any) -> tuple[int, httpx.Headers, bytes]:
        """One request: its answer's status, headers and body, read within the bounds above."""
        self._deadline.start(self._seconds)
        try:
            with self._http.stream(method, path, json=json) as reply:
                return reply.status_code, reply.headers, _bounded(reply, f"{method} {path}")
        except httpx.TimeoutException:
            if self._stall is None or self._deadline.passed():  # each wait was the time left
                raise httpx.ReadTimeout(f"no whole answer within {self._seconds:g} s") from None
            raise
        finally:
            self._deadline.start(None)

    def _refusal(self, status: int, headers: httpx.Headers, body: bytes) -> str:
        """The refusal on one line; the admin token never shows, whatever the server quoted."""
        if 300 <= status < 400:  # a web server's page: the Location is the message
            detail = one_line_detail(f"redirect to {headers.get('Location', '?')} not "
                                     "followed: give pfl-admin the server's final URL",
                                     (self._token,))
            return f"the server answered {status}: {detail}"
        try:
            detail = one_line_detail(strict_json(body), (self._token,))
        except (ValueError, RecursionError):
            detail = one_line_detail(body.decode("utf-8", "replace"), (self._token,))
        if status == 401:
            return f"the server refused the admin token (401: {detail})"
        return f"the server answered {status}: {detail}"


def _bounded(reply: httpx.Response, what: str) -> bytes:
    """The body, unencoded and up to its bound; a refusal's is cut there, a 2xx's refused."""
    ok = 200 <= reply.status_code < 300
    limit = MAX_ANSWER if ok else MAX_ERROR_ANSWER
    if reply.headers.get("Content-Encoding", "").strip().lower() not in ("", "identity"):
        if ok:
            raise AdminError(f"{what}: the server's answer has a Content-Encoding pfl-admin did "
                             "not ask for (it asks for identity); it was not read",
                             reply.status_code)
        return b"(an encoded message: not read)"
    declared = reply.headers.get("Content-Length", "")
    if ok and declared.isdigit() and int(declared) > limit:
        raise AdminError(f"{what}: the server's answer is over {limit} bytes (its "
                         "Content-Length); it was not read", reply.status_code)
    body = bytearray()
    for chunk in reply.iter_raw():
        body += chunk
        if len(body) > limit and ok:
            raise AdminError(f"{what}: the server's answer is over {limit} bytes; the rest "
                             "was not read", reply.status_code)
        if len(body) > limit:
            break
    return bytes(body[:limit])


def _parse(kind: type[Reply], data: Any) -> Reply:
    """Validate an answer against its type; a mismatch is an :class:`AdminError`."""
    try:
        return TypeAdapter(kind).validate_python(data)
    except ValidationError as err:
        raise AdminError(f"unexpected answer from the server: {err.errors()[0]['msg']}") from None
