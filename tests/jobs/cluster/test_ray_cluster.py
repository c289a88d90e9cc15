"""Ray across a job's nodes (jobs/cluster/ray_cluster.py): the ports a ``ray start`` is given are distinct.

Seen in CI: two of the agent ports chosen one at a time came out equal (the kernel handed a just-closed port
out again) and ``ray start --head`` refused to start ("trying to use a port number ... that is used by other
components"), so a requeued job never got its Ray. A designed socket stands in for the kernel and hands out
a repeated port on purpose: every port of the command line must still differ."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest

from jobs.cluster import ray_cluster
from streamgen.config import RayConfig

REPEATING = [41000, 41001, 41000, 41002, 41001, 41003, 41004, 41003, 41005, 41006, 41007, 41008]


class Kernel:
    """socket.socket() whose bind((host, 0)) hands out the next port of ``ports``, repeats included."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = itertools.chain(ports, itertools.count(42000))

    def __call__(self) -> Kernel.Socket:
        return Kernel.Socket(self)

    class Socket:
        def __init__(self, kernel: Kernel) -> None:
            self.kernel, self.port = kernel, 0

        def bind(self, addr: tuple[str, int]) -> None:
            self.port = next(self.kernel.ports)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

        def close(self) -> None:
            pass


def test_free_ports_are_distinct_and_avoid_the_taken_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_cluster.socket, "socket", Kernel(REPEATING))
    ports = ray_cluster.free_ports("127.0.0.1", 4, taken=(41002,))
    assert ports == [41000, 41001, 41003, 41004]  # the repeats and the taken port skipped, in order


def test_a_real_kernel_gives_distinct_ports_outside_its_ephemeral_range() -> None:
    ports = ray_cluster.free_ports("127.0.0.1", 6)
    low, high = ray_cluster.listen_range()
    assert len(set(ports)) == 6 and all(low <= p < high for p in ports)
    eph_low, eph_high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert not any(eph_low <= p <= eph_high for p in ports)  # no outgoing connection can take them meanwhile


@pytest.mark.parametrize(("ephemeral", "expected"), [
    ("32768\t60999\n", (20000, 32768)),  # Linux's default: below it, above Ray's worker ports
    ("1024 65000", (65001, 65536)),  # a site that widened it: the stretch above
    ("40000 65535", (20000, 40000)),
    ("not a range", (20000, 32768)),  # unreadable: Linux's default assumed
])
def test_listen_range_is_the_wider_stretch_outside_the_ephemeral_range(tmp_path: Path, ephemeral: str,
                                                                       expected: tuple[int, int]) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text(ephemeral)
    assert ray_cluster.listen_range(str(path)) == expected


def test_a_listening_port_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    busy = socket.socket()
    busy.bind(("127.0.0.1", ray_cluster.free_ports("127.0.0.1", 1)[0]))  # outside the ephemeral range: its
    busy.listen()  # neighbours are free unless someone listens there
    port = busy.getsockname()[1]
    try:
        monkeypatch.setattr(ray_cluster, "listen_range", lambda: (port, port + 3))
        assert set(ray_cluster.free_ports("127.0.0.1", 2)) <= {port + 1, port + 2}
        with pytest.raises(ray_cluster.RayBootstrapError, match="only 2 of 3 free ports"):
            ray_cluster.free_ports("127.0.0.1", 3)
    finally:
        busy.close()


def test_the_heads_command_line_has_no_port_twice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(ray_cluster.socket, "socket", Kernel(REPEATING))
    commands: list[list[str]] = []

    class Popen:
        def __init__(self, cmd: list[str], **_: object) -> None:
            commands.append(cmd)
            self.pid = 0

    monkeypatch.setattr(subprocess, "Popen", Popen)
    monkeypatch.setattr(ray_cluster, "node_ip", lambda alloc: "127.0.0.1")
    monkeypatch.setattr(ray_cluster, "_has_ray_client", lambda: True)
    monkeypatch.setattr(ray_cluster, "_ray_env", lambda ip, head: {})

    class Alloc:
        folder, job_id, restart, num_cpus, num_gpus = tmp_path, "7", 0, 2, 0

    ray_cluster.start_head(Alloc(), RayConfig())  # type: ignore[arg-type]
    (cmd,) = commands
    ports = [int(a.split("=")[1]) for a in cmd if a.startswith("--") and a.split("=")[0].endswith("port")]
    assert len(ports) == 2 + len(ray_cluster.AGENT_PORT_FLAGS)  # the head's, the client's, the agents'
    assert len(set(ports)) == len(ports), f"a port twice on ray start's command line: {cmd}"
