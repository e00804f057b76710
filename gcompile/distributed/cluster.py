"""Finding Ray and the cluster, with errors that come within seconds instead of a hang.

`ray.init(address=...)` pointed at a host where nothing listens, or where something other than
Ray listens, retries for minutes (Ray 2.60 logs "Failed to connect to GCS" every few seconds
and never gives up on a silent port). So before handing an address to Ray, `connect` checks
that a gRPC server answers there: Ray's GCS and Ray Client both speak gRPC, which is HTTP/2,
and an HTTP/2 server answers the client's connection preface with a SETTINGS frame. A refused
connection, a silent port or a server that answers something else is a GcompileError naming
the address, within `timeout` seconds.
"""
from __future__ import annotations

import logging
import socket
from typing import Any

from ..errors import GcompileError
from ..logs import logger

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"   # + an empty SETTINGS
_SETTINGS = 0x04


class WorkerError(GcompileError):
    """A data-parallel worker died, hung or failed, and the step could not be completed."""


def require_ray() -> Any:
    """The ray module, or a GcompileError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise GcompileError("gcompile.distributed needs Ray, which is not installed: "
                            "pip install 'gcompile[distributed]'") from None
    return ray


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of 'host:port', 'ray://host:port' or '[v6 address]:port'."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise GcompileError(f"cluster address {address!r} is not HOST:PORT (the head node's address, as `ray start "
                            "--head` prints it, e.g. 10.0.0.5:6379, or ray://HOST:10001 for Ray Client)")
    return host.strip("[]"), int(port)


def probe(address: str, timeout: float = 5.0) -> None:
    """Check, within about `timeout` seconds, that a gRPC server answers at `address`."""
    host, port = split_address(address)
    hint = ("start the cluster with `ray start --head` on its head node and pass the address it prints, "
            "or address=None for a local Ray on this machine")
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(_PREFACE)
            header = b""
            while len(header) < 9:
                block = conn.recv(9 - len(header))
                if not block:
                    break
                header += block
    except TimeoutError:
        raise GcompileError(f"no Ray cluster answers at {address!r}: no reply within {timeout:g} s; {hint}") from None
    except OSError as err:
        raise GcompileError(f"cannot reach a Ray cluster at {address!r}: {err.strerror or err}; {hint}") from None
    if len(header) < 9 or header[3] != _SETTINGS:
        raise GcompileError(f"the server at {address!r} is not a Ray cluster (it does not speak gRPC); {hint}")


def connect(address: str | None = None, timeout: float = 5.0) -> Any:
    """The ray module, initialised: joined to the cluster at `address`, or, with address=None,
    to the Ray this process already uses or else to a new local one (Ray's embedded default:
    one machine, all its CPUs). 'auto' joins the cluster `ray start` started on this machine."""
    ray = require_ray()
    if address is not None and address != "auto":
        probe(address, timeout)
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        if address not in (None, "auto") and "://" not in address and not _same(address, current):
            raise GcompileError(f"this process is already connected to the Ray cluster at {current}, not {address}; "
                                "call ray.shutdown() first, or pass that address")
        return ray
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=ray_log_level())
    except ConnectionError as err:
        raise GcompileError(f"cannot join a Ray cluster at {address!r}: {err}") from None
    return ray


def ray_log_level() -> int:
    """The level for Ray's own loggers in this process: gcompile's (`gcompile -q`: errors only;
    -v: Ray's info lines too), and never below WARNING without -v."""
    level = logger.getEffectiveLevel()
    return logging.INFO if level <= logging.INFO else max(level, logging.WARNING)


def _same(address: str, current: str) -> bool:
    """Whether `address` names the cluster whose GCS is at `current` (Ray reports the head's own IP,
    which a user may write as a host name, or as a loopback address on the head itself)."""
    (host, port), (other, other_port) = split_address(address), split_address(current)
    if port != other_port:
        return False
    if host in ("localhost", "127.0.0.1", "::1"):
        return True
    try:
        ips = [{a[4][0] for a in socket.getaddrinfo(name, port)} for name in (host, other)]
        return bool(ips[0] & ips[1])
    except OSError:
        return host == other
