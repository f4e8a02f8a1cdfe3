"""Three Docker hosts on one machine: a daemon per network namespace, joined in one Swarm.

Each "host" is a network namespace with its own address on a shared bridge (as three machines
on one LAN switch), its own hostname (a UTS namespace, so that ``docker service ps`` tells them
apart) and its own dockerd with its own data root, exec root, socket and managed containerd.
The first is the Swarm's manager, the other two join as workers. Everything is torn down by
:meth:`SwarmHosts.close`: daemons, their containerd shims, mounts, namespaces, the bridge and
the one iptables rule that lets the bridge forward (a host engine sets FORWARD to DROP).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deploy_helpers import poll


@dataclass
class Host:
    """One Docker host: a namespace, its address and its daemon."""

    name: str
    netns: str
    address: str
    root: Path
    veth: str
    daemon: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> str:
        """The daemon's API endpoint (a ``-H`` value)."""
        return f"unix://{self.root}/docker.sock"

    def docker(
        self,
        *args: str,
        timeout: float = 300,
        check: bool = True,
        env: dict[str, str] | None = None,
        stdin: int | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against this host's daemon; raise with its output on failure."""
        done = subprocess.run(
            ["docker", "-H", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            stdin=stdin,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"docker -H {self.socket} {' '.join(args)} exited {done.returncode}: "
                f"{(done.stdout + done.stderr).strip()[-3000:]}"
            )
        return done

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the daemon's log."""
        path = self.root / "dockerd.log"
        if not path.exists():
            return "<no log>"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class SwarmHosts:
    """The bridge, the three hosts and the Swarm they form (``hosts[0]`` is the manager)."""

    bridge: str
    gateway: str
    root: Path
    hosts: list[Host] = field(default_factory=list)
    forward_rule: list[str] = field(default_factory=list)

    @property
    def manager(self) -> Host:
        return self.hosts[0]

    def _sh(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
        return done

    def create(self, count: int = 3) -> None:
        """The bridge, ``count`` namespaces on it, and a daemon in each; waits until they answer."""
        self.root.mkdir(parents=True, exist_ok=True)
        prefix = self.gateway.rsplit(".", 1)[0]
        self._sh("ip", "link", "add", self.bridge, "type", "bridge")
        self._sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        self._sh("ip", "link", "set", self.bridge, "up")
        # br_netfilter sends bridged frames through FORWARD, which a host engine sets to DROP.
        self.forward_rule = ["FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT"]
        self._sh("iptables", "-I", *self.forward_rule)
        for i in range(1, count + 1):
            host = Host(
                name=f"gossip-h{i}",
                netns=f"{self.bridge}-h{i}",
                address=f"{prefix}.{10 + i}",
                root=self.root / f"h{i}",
                veth=f"{self.bridge}v{i}",
            )
            self.hosts.append(host)
            self._sh("ip", "netns", "add", host.netns)
            self._sh(
                "ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0",
                "netns", host.netns,
            )  # fmt: skip
            self._sh("ip", "link", "set", host.veth, "master", self.bridge, "up")
            self._sh("ip", "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            self._sh("ip", "-n", host.netns, "link", "set", "eth0", "up")
            self._sh("ip", "-n", host.netns, "link", "set", "lo", "up")
            self._sh("ip", "-n", host.netns, "route", "add", "default", "via", self.gateway)
            (host.root / "data").mkdir(parents=True)
            (host.root / "exec").mkdir()
            # nsenter, not `ip netns exec`: that one remounts /sys in a new mount namespace,
            # which hides the cgroup mounts dockerd needs ("Devices cgroup isn't mounted").
            # DOCKER_SERVICE_PREFER_OFFLINE_IMAGE: a Swarm task uses the image the host holds
            # instead of trying a registry first (none is reachable: 20-30 s per task start).
            script = (
                f"hostname {host.name} && DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1 "
                f"exec dockerd --data-root {host.root}/data "
                f"--exec-root {host.root}/exec -H {host.socket} "
                f"--pidfile {host.root}/docker.pid"
            )
            with open(host.root / "dockerd.log", "wb") as log:
                host.daemon = subprocess.Popen(
                    ["nsenter", f"--net=/var/run/netns/{host.netns}", "unshare", "--uts",
                     "sh", "-c", script],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )  # fmt: skip
        for host in self.hosts:
            poll(
                f"the daemon of {host.name} to answer (its log: {host.root}/dockerd.log)",
                lambda host=host: host.docker("info", check=False, timeout=30).returncode == 0,
                timeout=120,
                every=1.0,
            )

    def form_swarm(self) -> None:
        """``swarm init`` on the manager, ``swarm join`` on the others, until all are Ready."""
        self.manager.docker("swarm", "init", "--advertise-addr", self.manager.address)
        token = self.manager.docker("swarm", "join-token", "-q", "worker").stdout.strip()
        for host in self.hosts[1:]:
            # A join on a loaded machine can time out and keep trying in the background, or
            # end in an error state: leave and join again until the worker is active.
            def joined(host: Host = host) -> bool:
                state = host.docker(
                    "info", "--format", "{{.Swarm.LocalNodeState}}", timeout=60
                ).stdout.strip()
                if state == "active":
                    return True
                if state in ("inactive", "error"):
                    host.docker("swarm", "leave", "--force", check=False, timeout=60)
                    host.docker(
                        "swarm", "join", "--token", token, "--advertise-addr", host.address,
                        f"{self.manager.address}:2377", check=False, timeout=90,
                    )  # fmt: skip
                return False

            poll(f"{host.name} to join the Swarm", joined, timeout=300, every=2.0)
        for host in self.hosts:
            node_id = self.node_id(host)
            self.manager.docker(
                "node", "update", "--label-add", f"gossip-host={host.name}", node_id
            )

        def all_ready() -> bool:
            out = self.manager.docker("node", "ls", "--format", "{{.Hostname}} {{.Status}}")
            rows = [line.split() for line in out.stdout.splitlines()]
            return sorted(r[0] for r in rows if r[1] == "Ready") == sorted(
                h.name for h in self.hosts
            )

        poll("the three hosts to be Ready in the Swarm", all_ready, timeout=120, every=1.0)

    def node_id(self, host: Host) -> str:
        """The Swarm node id of ``host``."""
        return host.docker("info", "--format", "{{.Swarm.NodeID}}").stdout.strip()

    def cut(self, host: Host) -> None:
        """Cut ``host``'s link to the bridge, as a pulled cable: its daemon keeps running."""
        self._sh("ip", "link", "set", host.veth, "down")

    def close(self, say: Callable[[str], None] = print) -> None:
        """Stop the daemons and remove everything :meth:`create` made; report what resisted."""
        for host in self.hosts:
            if host.daemon is None or host.daemon.poll() is not None:
                continue
            host.daemon.send_signal(signal.SIGTERM)
        for host in self.hosts:
            if host.daemon is None:
                continue
            try:
                host.daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                say(f"{host.name}: dockerd did not stop in 60 s; killed")
                host.daemon.kill()
                host.daemon.wait(timeout=30)
        # Containerd shims and anything else started with our paths in its command line.
        marker = str(self.root).encode()
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
                continue
            try:
                cmdline = (pid_dir / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid_dir.name), signal.SIGKILL)
        time.sleep(0.5)
        # Mounts the daemons left under their roots (overlay layers, netns files, shm).
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for point in sorted((m for m in mounts if m.startswith(str(self.root))), reverse=True):
            self._sh("umount", "-l", point, check=False)
        for host in self.hosts:
            self._sh("ip", "netns", "del", host.netns, check=False)
        self._sh("ip", "link", "del", self.bridge, check=False)
        if self.forward_rule:
            self._sh("iptables", "-D", *self.forward_rule, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
