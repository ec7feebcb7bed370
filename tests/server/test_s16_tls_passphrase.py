"""A TLS key with a pass phrase: asked once, on the terminal, without echo; never shown.

Before: OpenSSL asked for it twice, once when the start-up check loaded the pair and again
when uvicorn loaded it (and once more in each worker). A start without any terminal or input
ended in "not a certificate and its key ([SSL] PEM lib)", as if the files were wrong.
"""

from __future__ import annotations

import datetime
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from server_harness import ADMIN, BIN, free_port, run_toml
from waiting import GUARD

PASSPHRASE = "correct horse battery staple"
PROMPT = b"pass phrase"


def encrypted_pair(folder: Path) -> list[str]:
    """A self-signed certificate and its key, encrypted with PASSPHRASE: the serve flags."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSPHRASE.encode())))
    return ["--tls-certfile", str(folder / "cert.pem"), "--tls-keyfile", str(folder / "key.pem")]


def serve_args(folder: Path, port: int, *flags: str) -> list[str]:
    (folder / "run.toml").write_text(run_toml(kind="dirichlet"))
    (folder / "admin").write_text(ADMIN)
    (folder / "admin").chmod(0o600)
    return [str(BIN / "pfl-server"), "serve", "--run-config", str(folder / "run.toml"),
            "--admin-token-file", str(folder / "admin"), "--data-dir", str(folder / "data"),
            "--port", str(port), "--log-level", "warning", *encrypted_pair(folder), *flags]


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"https://127.0.0.1:{port}/v1/health", verify=False,
                         timeout=GUARD).status_code == 200
    except httpx.TransportError:
        return False


def test_the_pass_phrase_is_asked_once_on_the_terminal_for_every_worker(tmp_path):
    port = free_port()
    args = serve_args(tmp_path, port, "--workers", "2")
    pid, terminal = pty.fork()
    if pid == 0:  # the child: pfl-server with the pseudo-terminal as its controlling one
        os.execv(args[0], args)
    seen, answered = b"", 0
    try:
        deadline = time.monotonic() + GUARD
        while not (answered and healthy(port)):
            assert time.monotonic() < deadline, seen
            if select.select([terminal], [], [], 0.2)[0]:  # poll: the server's terminal output
                try:
                    seen += os.read(terminal, 65536)
                except OSError as err:  # the server exited: the terminal is gone
                    raise AssertionError(f"pfl-server exited: {seen!r}") from err
            asked = seen.count(PROMPT)
            assert asked <= 1, f"asked {asked} times: {seen!r}"
            if asked > answered:
                os.write(terminal, f"{PASSPHRASE}\n".encode())
                answered = asked
        assert seen.count(PROMPT) == 1 and PASSPHRASE.encode() not in seen, seen
    except BaseException:  # workers may wait on the terminal: end its whole session at once
        os.killpg(pid, signal.SIGKILL)
        raise
    else:
        os.kill(pid, signal.SIGTERM)
    finally:
        os.waitpid(pid, 0)
        os.close(terminal)


def start_without_terminal(tmp_path: Path, given: str) -> subprocess.CompletedProcess:
    """pfl-server with no controlling terminal and ``given`` as its standard input."""
    return subprocess.run(serve_args(tmp_path, 0), input=given, capture_output=True,
                          text=True, timeout=GUARD, start_new_session=True)


def test_no_pass_phrase_or_a_wrong_one_is_one_line_that_never_shows_it(tmp_path):
    files = (f"--tls-certfile {tmp_path / 'cert.pem'}, --tls-keyfile {tmp_path / 'key.pem'}")
    done = start_without_terminal(tmp_path, "")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"pfl-server: {files}: the key is encrypted and no pass phrase came (none on the "
        "terminal or standard input)")
    for wrong in ["hunter2 is not it", "hunter2" * 300]:  # OpenSSL takes 1024 bytes at most
        done = start_without_terminal(tmp_path, f"{wrong}\n")
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines()[-1].startswith(
            f"pfl-server: {files}: not a certificate and its key, or not the key's pass phrase (")
        assert "hunter2" not in done.stdout + done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made
