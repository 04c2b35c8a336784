"""A ``redis-server`` of our own on a free loopback port: for the tests, the demo and bench/.

One implementation so that every place that needs a throw-away Redis starts it the same way
(own process group, temp dir removed on stop, never left running on Ctrl-C). No persistence,
unless ``durable``: then every write is in the append-only file before Redis answers, so
the chaos tier can SIGKILL it and start it again (``restart``) with nothing lost.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import redis

START_TIMEOUT_S = 10.0
"""How long a started redis-server may take to answer PING."""


class LocalRedisError(RuntimeError):
    """redis-server is missing or did not come up; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def redis_answers(url: str, timeout_s: float = 1.0) -> bool:
    """Whether a real Redis at ``url`` answers PING (``fakeredis://`` is not asked)."""
    if url.startswith("fakeredis://"):
        return False
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError, ValueError):
        return False


@dataclass
class RedisServer:
    """A ``redis-server`` this process started (own process group, temp dir)."""

    proc: subprocess.Popen[bytes]
    url: str
    workdir: str
    exe: str = "redis-server"
    durable: bool = False
    extra: tuple[str, ...] = ()
    """More redis-server arguments (a cluster node's)."""

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def kill(self) -> None:
        """SIGKILL, as a crash does (the data directory stays)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Start it again on the same port and directory (after ``kill``); waits for PING."""
        self.kill()
        self.proc = _spawn(self.exe, self.port, self.workdir, self.durable, self.extra)
        _wait_answering(self)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _spawn(exe: str, port: int, workdir: str, durable: bool, extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
    return subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", *persistence, "--dir", workdir, *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_answering(server: RedisServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while not redis_answers(server.url, 0.5):
            code = server.proc.poll()
            if code is not None or time.monotonic() > deadline:
                raise LocalRedisError(f"redis-server on port {server.port} did not answer PING (exit code {code})")
            time.sleep(0.05)
    except BaseException:  # Ctrl-C included: never leave it running
        server.stop()
        raise


def start_redis_server(exe: str | None = None, *, durable: bool = False) -> RedisServer:
    """``redis-server`` on a free loopback port; waits for PING. ``durable``: append-only
    file, fsync'd on every write (survives ``kill`` + ``restart``)."""
    exe = exe or shutil.which("redis-server")
    if exe is None:
        raise LocalRedisError("redis-server is not on PATH")
    port, workdir = free_port(), tempfile.mkdtemp(prefix="ovstream-redis-")
    server = RedisServer(_spawn(exe, port, workdir, durable), f"redis://127.0.0.1:{port}/0", workdir, exe, durable)
    _wait_answering(server)
    return server


def follow(replica: RedisServer, master: RedisServer | None) -> None:
    """Make ``replica`` a replica of ``master`` and wait until its link is up (it holds the
    master's data); ``master`` None: it stops following (``REPLICAOF NO ONE``)."""
    client = redis.Redis.from_url(replica.url, socket_timeout=5.0)
    try:
        if master is None:
            client.execute_command("REPLICAOF", "NO", "ONE")
            return
        client.execute_command("REPLICAOF", "127.0.0.1", master.port)
    finally:
        client.close()
    deadline = time.monotonic() + START_TIMEOUT_S
    # linked on its side, and online on the master's (after its first ACK, up to a second
    # later): only then does the master's WAIT count it
    while not (_replica_linked(replica.url) and _replica_online(master.url, replica.port)):
        if time.monotonic() > deadline:
            raise LocalRedisError(f"redis-server on port {replica.port} did not link to its master")
        time.sleep(0.05)


def start_redis_sentinel(
    master: RedisServer, name: str = "mymaster", *, quorum: int = 1, down_after_ms: int = 1000
) -> RedisServer:
    """A Sentinel (``redis-server --sentinel``) on a free loopback port watching ``master``
    as ``name``: it declares the master down after ``down_after_ms`` without an answer and, with
    ``quorum`` Sentinels agreeing, promotes one of its replicas. Its config file (Sentinel
    rewrites it as it learns) lives in its own temp dir."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise LocalRedisError("redis-server is not on PATH")
    port, workdir = free_port(), tempfile.mkdtemp(prefix="ovstream-sentinel-")
    config = f"{workdir}/sentinel.conf"
    with open(config, "w") as f:
        f.write(
            f"port {port}\nbind 127.0.0.1\ndir {workdir}\n"
            f"sentinel monitor {name} 127.0.0.1 {master.port} {quorum}\n"
            f"sentinel down-after-milliseconds {name} {down_after_ms}\n"
            f"sentinel failover-timeout {name} {max(3 * down_after_ms, 3000)}\n"
        )
    proc = subprocess.Popen(
        [exe, config, "--sentinel"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    sentinel = RedisServer(proc, f"redis://127.0.0.1:{port}", workdir, exe)
    _wait_answering(sentinel)
    return sentinel


@dataclass
class RedisClusterServers:
    """A Redis Cluster this process started: ``nodes`` (the masters first, then their replicas,
    as created; a failover swaps roles, ``role`` asks the node)."""

    nodes: list[RedisServer]

    @property
    def url(self) -> str:
        """A seed node's URL: a cluster client discovers the others from it."""
        return self.nodes[0].url

    def wait_ok(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every node says ``cluster_state:ok`` and every replica's link to its master is
        up (after a node's restart, say: it loads its data and syncs, so allow for a busy box)."""
        deadline = time.monotonic() + timeout_s
        while not all(_cluster_ok(n.url) and _replica_linked(n.url) for n in self.nodes):
            if time.monotonic() > deadline:
                raise LocalRedisError("the cluster did not reach cluster_state:ok")
            time.sleep(0.05)

    def role(self, node: RedisServer) -> str:
        """ "master" or "slave", as the node says now ("" when it does not answer)."""
        client = redis.Redis.from_url(node.url, socket_timeout=1.0)
        try:
            return str(client.info("replication").get("role", ""))
        except redis.RedisError:
            return ""
        finally:
            client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_redis_cluster(
    masters: int = 3,
    exe: str | None = None,
    *,
    durable: bool = False,
    replicas: int = 0,
    node_timeout_ms: int | None = None,
) -> RedisClusterServers:
    """``masters`` cluster-enabled ``redis-server``s on free loopback ports, each with
    ``replicas`` replicas, joined by ``redis-cli --cluster create`` (the 16,384 slots split
    between the masters); waits until every node says ``cluster_state:ok``. ``durable`` as in
    ``start_redis_server``: a node can be killed and ``restart``ed with its data and its place
    in the cluster (nodes.conf). ``node_timeout_ms``: how long a master may be unreachable
    before its replica is promoted (Redis's default 15 s)."""
    exe = exe or shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if exe is None or cli is None:
        raise LocalRedisError("redis-server and redis-cli must be on PATH for a cluster")
    nodes: list[RedisServer] = []
    try:
        for _ in range(masters * (1 + replicas)):
            port, workdir = _cluster_port(), tempfile.mkdtemp(prefix="ovstream-redis-cluster-")
            extra: tuple[str, ...] = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
            if node_timeout_ms is not None:
                extra += ("--cluster-node-timeout", str(node_timeout_ms))
            url = f"redis://127.0.0.1:{port}"
            server = RedisServer(_spawn(exe, port, workdir, durable, extra), url, workdir, exe, durable, extra)
            nodes.append(server)
            _wait_answering(server)
        addresses = [f"127.0.0.1:{n.port}" for n in nodes]
        created = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", str(replicas), "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if created.returncode != 0:
            raise LocalRedisError(f"redis-cli --cluster create failed: {created.stdout[-500:]}{created.stderr[-500:]}")
        cluster = RedisClusterServers(nodes)
        cluster.wait_ok()
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return cluster


CLUSTER_BUS_OFFSET = 10_000
"""A cluster node also listens on its port + 10,000 (the cluster bus)."""


def _cluster_port() -> int:
    """A free port whose cluster bus port is free too (both below 65,536)."""
    for _ in range(200):
        port = random.randint(20_000, 65_535 - CLUSTER_BUS_OFFSET)
        if port_free(port) and port_free(port + CLUSTER_BUS_OFFSET):
            return port
    raise LocalRedisError("no free port pair for a cluster node")


def replication_info(url: str) -> dict[str, Any] | None:
    """``INFO replication`` of the server at ``url``; None when it does not answer."""
    client = redis.Redis.from_url(url, socket_timeout=1.0)
    try:
        return dict(client.info("replication"))
    except redis.RedisError:
        return None
    finally:
        client.close()


def _replica_linked(url: str) -> bool:
    """A master, or a replica whose link to its master is up (it has the data)."""
    info = replication_info(url)
    return info is not None and (info.get("role") != "slave" or info.get("master_link_status") == "up")


def _replica_online(master_url: str, port: int) -> bool:
    """Whether the master at ``master_url`` counts the replica on ``port`` online."""
    info = replication_info(master_url) or {}
    replicas = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
    return any(int(r.get("port", 0)) == port and r.get("state") == "online" for r in replicas)


def _cluster_ok(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=1.0)
    try:
        return b"cluster_state:ok" in client.execute_command("CLUSTER", "INFO")
    except redis.RedisError:
        return False
    finally:
        client.close()
