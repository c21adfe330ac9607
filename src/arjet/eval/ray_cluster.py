"""Reaching Ray for `arjet serve --ray` and `arjet eval --ray`: the module itself (`import_ray`), the cluster
(`connect`: `--ray-address` checked before Ray is asked, since Ray retries without end an address where
nothing listens or another service does), and the room a run asks of it (`Room.check`: Ray waits without end for resources no node has).

Ray is an optional extra: this module imports it only when asked for it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

CONNECT_SECONDS = 5.0  # how long `--ray-address` has to accept a TCP connection
ADDRESS_FORMS = (
    "host:port (the head's GCS, e.g. 10.0.0.5:6379), ray://host:port (Ray Client), auto (a running cluster) "
    "or local (a new one on this machine)"
)
OWN_SEARCH = {"auto", "local"}  # Ray finds (or starts) these itself, and fails at once when it cannot
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = bytes(9)[:3] + b"\x04" + bytes(5)  # length 0, type SETTINGS, no flags, stream 0
FRAME_HEADER_BYTES, SETTINGS_FRAME = 9, 0x04
START_HEAD = "start a head with `ray start --head` (it prints the address to give)"
ADD_NODES = "add nodes with `ray start --address HEAD` on more machines"


class RayMissing(ImportError, ValueError):
    """Ray is not installed (a ValueError too: the command line tells it in one line)."""


class ClusterTooSmall(ValueError):
    """The Ray cluster lacks the CPUs or GPUs a run asks for (Ray would wait for them without end)."""


def import_ray(option: str = "--ray"):
    """The `ray` module, or `RayMissing` naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise RayMissing(f"Ray is not installed; {option} needs it: pip install 'arjet[ray]'") from None
    return ray


def split_address(address: str) -> tuple[str, int] | None:
    """`address`'s host and port (`host:port`, `ray://host:port`, `[v6]:port`); None for `auto` and
    `local`. A ValueError naming the forms Ray takes for anything else."""
    if address in OWN_SEARCH:
        return None
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not (colon and host and port.isdigit() and 0 < int(port) < 65536) or "/" in host:
        raise ValueError(
            f"--ray-address {address!r} is not an address of a Ray cluster; give {ADDRESS_FORMS}"
        )
    return host, int(port)


def check_address(address: str | None, seconds: float = CONNECT_SECONDS) -> None:
    """Refuse `--ray-address` in one line unless it has a form Ray takes and, for host:port and
    ray://host:port, something there accepts a TCP connection within `seconds` and answers as a gRPC server
    does, as Ray's GCS and its client server are (None, auto and local: Ray's own search). Ray retries an
    address held by another service (a web server, redis) without end."""
    where = None if address is None else split_address(address)
    if where is None:
        return
    try:
        connection = socket.create_connection(where, timeout=seconds)
    except socket.gaierror as error:
        reason = f"no such host: {error.strerror or error}"
    except TimeoutError:
        reason = f"no answer within {seconds:g} s"
    except ConnectionRefusedError:
        reason = "connection refused: nothing listens there"
    except OSError as error:
        reason = error.strerror or str(error)
    else:
        with connection:
            if speaks_grpc(connection):
                return
        reason = (
            "something listens there but does not answer as Ray's gRPC server does: another service's port?"
        )
    raise ConnectionError(f"cannot reach the Ray cluster at --ray-address {address} ({reason}); {START_HEAD}")


def speaks_grpc(connection: socket.socket) -> bool:
    """Whether the peer of `connection` answers HTTP/2's client preface and an empty SETTINGS frame with a
    SETTINGS frame (RFC 9113, 3.4: a server's preface), as gRPC servers do; within the socket's timeout."""
    header = b""
    try:
        connection.sendall(HTTP2_PREFACE + EMPTY_SETTINGS)
        while len(header) < FRAME_HEADER_BYTES:
            chunk = connection.recv(FRAME_HEADER_BYTES - len(header))
            if not chunk:
                return False  # it closed the connection: not HTTP/2
            header += chunk
    except OSError:  # a timeout, or a reset: no HTTP/2 server
        return False
    return header[3] == SETTINGS_FRAME


def connect(address: str | None):
    """The `ray` module, joined to the cluster at `address` (checked first: `check_address`) unless this
    process already is; None: Ray's default (a running local cluster, else a new one)."""
    ray = import_ray()
    if not ray.is_initialized():
        check_address(address)
        ray.init(address=address)
    return ray


@dataclass(frozen=True)
class Room:
    """What a run asks of a Ray cluster: `units` of `what` (a singular noun), `cpus` and `gpus` each;
    `fewer` names the options that ask for less."""

    units: int
    cpus: float
    gpus: float
    what: str
    fewer: str

    def check(self, ray: Any) -> None:
        """Refuse (`ClusterTooSmall`) when the joined cluster's nodes, all together, lack the CPUs or GPUs
        of every unit (on an autoscaling cluster: the nodes present now), before any actor starts."""
        have = ray.cluster_resources()
        cluster = (have.get("CPU", 0.0), have.get("GPU", 0.0))
        need = (self.units * self.cpus, self.units * self.gpus)
        if all(asked <= held + 1e-9 for asked, held in zip(need, cluster, strict=True)):
            return
        asked = (
            f"1 {self.what} needs {_amount(*need)};"
            if self.units == 1
            else f"{self.units} {self.what}s of {_amount(self.cpus, self.gpus)} each need {_amount(*need)} in all;"
        )
        raise ClusterTooSmall(
            f"{asked} the Ray cluster has {_amount(*cluster)} (on the nodes it has now); ask for less "
            f"({self.fewer}), or {ADD_NODES}"
        )


def _amount(cpus: float, gpus: float) -> str:
    return f"{cpus:g} CPU{'s' * (cpus != 1)} and {gpus:g} GPU{'s' * (gpus != 1)}"
