"""A free TCP port on the loopback interface, for tests that start servers or process groups."""

import socket


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
