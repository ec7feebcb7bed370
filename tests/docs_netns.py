"""A private network namespace for a doc whose example serves on the real default address.

Such a doc runs under ``unshare --net`` so that its ``pfl-server serve`` on 127.0.0.1:8000
cannot collide with a server another test started at the same time.
"""

import fcntl
import os
import socket
import struct


def loopback_up() -> None:
    """Bring up ``lo`` in a fresh network namespace (SIOCGIFFLAGS / SIOCSIFFLAGS)."""
    get_flags, set_flags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock, get_flags, request))[1]
        fcntl.ioctl(sock, set_flags, struct.pack("16sH14s", b"lo", flags | iff_up, b""))


def private_network_prefix() -> list[str]:
    """The argv prefix that runs a command in its own network namespace."""
    return ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--net"]
