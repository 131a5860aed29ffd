"""The Docker engine a local run uses: a daemon of its own, on a bridge of its own, behind a firewall of its own.

The run does not use a Docker daemon the machine may already have: it starts one of its own (Debian's docker.io,
installed with apt-get when missing), with its own socket (DOCKER_HOST below), its own state under /run, and as its
default network a Linux bridge the run creates itself. `sam local` creates every Lambda container on the daemon's
default network (then connects it to a --docker-network, if given), so that bridge is where every container is.

The rule: a container talks only to this machine's own processes that the run allows (moto and the stand-ins, on
the bridge's address), and no other address is ever a target. The firewall says so (iptables and ip6tables, their
rules named by the bridge and a chain of the run's own):
- from the bridge to this machine (INPUT): replies to what this machine opened (`sam` talking to the runtime
  emulator in the container, through the port Docker publishes on 127.0.0.1), and new TCP connections to the allowed
  ports of the bridge's address; every other packet is refused (a TCP reset or an ICMP error: the caller fails at
  once, instead of waiting for a timeout);
- through the bridge (FORWARD), to any other address, another container of the bridge included (the bridge hands
  its frames to iptables): refused or dropped, whatever this machine's forwarding setting;
- no IPv6 on the bridge, and ip6tables drops it anyway.
The daemon itself is started with --iptables=false, --ip-masq=false and --ip-forward=false: it adds no rule, no NAT
and does not switch forwarding on.

Everything is named here, so that a run, or the next run after a killed one, finds it and removes it: the daemon's
processes (whose arguments name STATE_DIR), the bridge, the chain, the rules and any mount left. The images the
daemon keeps (its data root) are cached between runs, under the user's cache directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from local.process import LocalError, run, start

STATE_DIR = Path("/run/gpu-fault-responder-local")
SOCKET = STATE_DIR / "docker.sock"
DOCKER_HOST = f"unix://{SOCKET}"
BRIDGE = "gfrlocal0"
CHAIN = "GFR-LOCAL-IN"
LOCK_PATH = Path("/run/gpu-fault-responder-local.lock")
_ENGINE_FILE = STATE_DIR / "engine.json"
# Private /24s the bridge may take: the first that no address or route of this machine overlaps.
_CANDIDATE_SUBNETS = [ipaddress.IPv4Network(f"10.213.{third}.0/24") for third in range(256)]
_PACKAGES = {"dockerd": "docker.io", "docker": "docker.io", "iptables": "iptables", "ip6tables": "iptables"}
_READY_SECONDS = 60
_STOP_SECONDS = 20


def cache_dir() -> Path:
    """Kept between runs (the daemon's images): $XDG_CACHE_HOME/gpu-fault-responder/local, ~/.cache by default."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-fault-responder" / "local"


def docker_environment() -> dict[str, str]:
    """What a `docker` or `sam` command needs to reach the run's daemon."""
    return {"DOCKER_HOST": DOCKER_HOST}


def docker(*arguments: str, timeout: float = 120, check: bool = True) -> str:
    """`docker ARGUMENTS` against the run's daemon; what it printed."""
    return run(["docker", *arguments], env=docker_environment(), timeout=timeout, check=check).stdout


@dataclass(frozen=True)
class Engine:
    """A started engine: the daemon's process id, the bridge's subnet and this machine's address on it."""

    pid: int
    subnet: str
    gateway: str
    storage_driver: str

    def allow(self, port: int) -> None:
        """Let the containers open TCP connections to `port` on the bridge's address (moto's, a stand-in's)."""
        _iptables("-I", CHAIN, "2", "-d", f"{self.gateway}/32", "-p", "tcp", "--dport", str(port), "-j", "ACCEPT")


@contextlib.contextmanager
def machine_lock(out: TextIO, wait_seconds: float = 1800) -> Iterator[None]:
    """One local run at a time on this machine (one daemon, one bridge): a run started while another holds it waits
    for it, saying so, up to `wait_seconds`."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_PATH.open("a+") as handle:
        deadline = time.monotonic() + wait_seconds
        said = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                raise LocalError(f"another local run still holds {LOCK_PATH} after {wait_seconds:.0f} s")
            if not said:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                print(f"local: waiting for another local run to finish ({holder})", file=out, flush=True)
                said = True
            time.sleep(0.5)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}, {Path.cwd()}\n")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def require_root() -> None:
    if os.geteuid() != 0:
        raise LocalError(
            "the local runs install the Docker engine if missing and start a daemon, a bridge and firewall rules of "
            "their own, which needs root (CI runs as root). Without root, use sam local invoke against your own AWS "
            "account and your own Docker: README.md, 'Replay events'."
        )


def ensure_installed(out: TextIO) -> None:
    """dockerd, docker, iptables and ip6tables, from Debian's packages (apt-get) when one is missing."""
    missing = sorted({package for program, package in _PACKAGES.items() if shutil.which(program) is None})
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise LocalError(f"missing {', '.join(missing)} and no apt-get to install them with: install Docker first")
    started = time.monotonic()
    print(f"local: installing {' '.join(missing)} (apt-get)", file=out, flush=True)
    environment = {"DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    if run(install, env=environment, timeout=900, check=False).returncode != 0:
        run(["apt-get", "update"], env=environment, timeout=600)
        run(install, env=environment, timeout=900)
    print(f"local: installed {' '.join(missing)} in {time.monotonic() - started:.0f} s", file=out, flush=True)


def start_engine(out: TextIO) -> Engine:
    """Bridge, firewall and daemon, from nothing (what an earlier run left is removed first). Hold machine_lock."""
    require_root()
    ensure_installed(out)
    removed = stop_engine()
    if removed:
        print(f"local: removed what an earlier run left: {'; '.join(removed)}", file=out, flush=True)
    started = time.monotonic()
    STATE_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    subnet = _free_subnet()
    gateway = str(next(subnet.hosts()))
    try:
        _create_bridge(gateway, subnet)
        _close_firewall()
        daemon = _start_daemon()
        _ENGINE_FILE.write_text(json.dumps({"pid": daemon, "subnet": str(subnet), "gateway": gateway}))
        removed = _remove_containers()  # a killed run's, kept in the cached data root
        if removed:
            print(f"local: removed what an earlier run left: {removed[0]}", file=out, flush=True)
        driver = docker("info", "--format", "{{.Driver}}").strip()
    except BaseException:
        stop_engine()
        raise
    print(
        f"local: Docker daemon {daemon} on {DOCKER_HOST} ({driver}), bridge {BRIDGE} {subnet}, this machine "
        f"{gateway} ({time.monotonic() - started:.1f} s)",
        file=out,
        flush=True,
    )
    if driver != "overlay2":
        print(
            f"local: storage driver {driver}: the filesystem of {cache_dir()} does not allow overlay2, and every "
            "container starts several times slower",
            file=out,
            flush=True,
        )
    return Engine(pid=daemon, subnet=str(subnet), gateway=gateway, storage_driver=driver)


def stop_engine() -> list[str]:
    """Remove every container, the daemon and its processes, the firewall rules and the bridge; what was removed.
    Safe to call when nothing (or only part) is there."""
    removed: list[str] = []
    recorded = _recorded()
    if SOCKET.exists():
        removed += _remove_containers()
    daemon = _daemon_pid(recorded)
    if daemon is not None:
        _terminate([daemon], _STOP_SECONDS)
        removed.append(f"dockerd {daemon}")
    stray = own_processes(recorded)
    if stray:
        _terminate(stray, 5)
        removed.append(f"processes {', '.join(map(str, stray))}")
    mounts = _own_mounts()
    for mount in reversed(mounts):
        run(["umount", "--lazy", mount], check=False)
    if mounts:
        removed.append(f"{len(mounts)} mount(s)")
    if _open_firewall():
        removed.append("firewall rules")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        run(["ip", "link", "delete", BRIDGE], check=False)
        removed.append(f"bridge {BRIDGE}")
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR, ignore_errors=True)
    return removed


def _remove_containers() -> list[str]:
    with contextlib.suppress(LocalError):
        containers = docker("ps", "--all", "--quiet", timeout=30).split()
        if containers:
            docker("rm", "--force", "--volumes", *containers, timeout=120, check=False)
            return [f"{len(containers)} container(s)"]
    return []


def leftovers() -> list[str]:
    """What of a run is still on this machine (nothing, once a run has ended, however it ended)."""
    found = [f"process {pid}: {_cmdline(pid)}" for pid in own_processes(_recorded())]
    found += [f"container process {pid}: {_cmdline(pid)}" for pid in _pids() if _program(pid) == _EMULATOR]
    found += [f"mount {mount}" for mount in _own_mounts()]
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"bridge {BRIDGE}")
    if shutil.which("iptables") is not None and _iptables("-S", CHAIN, check=False):
        found.append(f"iptables chain {CHAIN}")
    if SOCKET.exists():
        found.append(f"socket {SOCKET}")
    containers = cache_dir() / "docker" / "containers"
    found += [f"container {entry.name}" for entry in containers.glob("*")] if containers.is_dir() else []
    return found


def own_processes(recorded: dict[str, str] | None = None) -> list[int]:
    """Processes of the run's engine: dockerd, its containerd and shims (their arguments name STATE_DIR), and the port
    proxies of its containers (which name a container address of the bridge's subnet)."""
    subnet = ipaddress.ip_network((recorded or {}).get("subnet") or _CANDIDATE_SUBNETS[0].supernet(new_prefix=16))
    found = []
    for pid in _pids():
        words, program = _cmdline(pid).split(), _program(pid)
        if program not in _ENGINE_PROGRAMS:
            continue
        mine = any(str(STATE_DIR) in word for word in words)
        if not mine and program == "docker-proxy" and "-container-ip" in words[:-1]:
            with contextlib.suppress(ValueError):
                mine = ipaddress.ip_address(words[words.index("-container-ip") + 1]) in subnet
        if mine:
            found.append(pid)
    return found


_ENGINE_PROGRAMS = {"dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "runc", "docker-proxy"}
_EMULATOR = "aws-lambda-rie"
"""What runs in every Lambda container sam local starts (SAM CLI's Runtime Interface Emulator)."""


def _pids() -> list[int]:
    return [
        int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit() and int(entry.name) != os.getpid()
    ]


# --- The bridge and the firewall -------------------------------------------------------------------------------------


def _free_subnet() -> ipaddress.IPv4Network:
    taken = []
    for family_output in (run(["ip", "-4", "-o", "addr", "show"]).stdout, run(["ip", "-4", "route", "show"]).stdout):
        for line in family_output.splitlines():
            for word in line.split():
                with contextlib.suppress(ValueError):
                    if "/" in word or word[0].isdigit():
                        taken.append(ipaddress.ip_network(word, strict=False))
    for candidate in _CANDIDATE_SUBNETS:
        if not any(candidate.overlaps(network) for network in taken if network.version == 4):
            return candidate
    raise LocalError("no free private /24 for the bridge among 10.213.0.0/16")


def _create_bridge(gateway: str, subnet: ipaddress.IPv4Network) -> None:
    # nf_call_iptables: frames between two ports of the bridge (container to container) go through iptables too.
    run(["ip", "link", "add", "name", BRIDGE, "type", "bridge", "nf_call_iptables", "1", "nf_call_ip6tables", "1"])
    ipv6 = Path(f"/proc/sys/net/ipv6/conf/{BRIDGE}/disable_ipv6")
    if ipv6.exists():
        ipv6.write_text("1\n")
    run(["ip", "addr", "add", f"{gateway}/{subnet.prefixlen}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def _iptables(*arguments: str, program: str = "iptables", check: bool = True) -> bool:
    return run([program, "-w", "10", *arguments], check=check).returncode == 0


def _close_firewall() -> None:
    _iptables("-N", CHAIN)
    _iptables("-A", CHAIN, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
    _iptables("-A", CHAIN, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset")
    _iptables("-A", CHAIN, "-j", "REJECT", "--reject-with", "icmp-admin-prohibited")
    for rule in _JUMPS:
        _iptables("-I", *rule)
    for rule in _JUMPS6:
        _iptables("-I", *rule, program="ip6tables")


_JUMPS = [
    ("INPUT", "1", "-i", BRIDGE, "-j", CHAIN),
    ("FORWARD", "1", "-o", BRIDGE, "-j", "DROP"),
    ("FORWARD", "1", "-i", BRIDGE, "-j", "REJECT", "--reject-with", "icmp-admin-prohibited"),
]
_JUMPS6 = [
    ("INPUT", "1", "-i", BRIDGE, "-j", "DROP"),
    ("FORWARD", "1", "-o", BRIDGE, "-j", "DROP"),
    ("FORWARD", "1", "-i", BRIDGE, "-j", "DROP"),
]


def _open_firewall() -> bool:
    """Remove the run's rules and chain, wherever an earlier run left them; whether there were any."""
    found = False
    for rules, program in ((_JUMPS, "iptables"), (_JUMPS6, "ip6tables")):
        if shutil.which(program) is None:
            continue
        for chain, _, *rule in rules:
            while _iptables("-D", chain, *rule, program=program, check=False):
                found = True
    if shutil.which("iptables") is not None and _iptables("-S", CHAIN, check=False):
        _iptables("-F", CHAIN)
        _iptables("-X", CHAIN)
        found = True
    return found


# --- The daemon ------------------------------------------------------------------------------------------------------


def _start_daemon() -> int:
    data_root = cache_dir() / "docker"
    data_root.mkdir(parents=True, exist_ok=True)
    config = STATE_DIR / "daemon.json"
    config.write_text("{}\n")  # not /etc/docker/daemon.json: nothing of the machine's Docker settings applies
    log = STATE_DIR / "dockerd.log"
    daemon = start(
        [
            "dockerd",
            f"--host={DOCKER_HOST}",
            f"--data-root={data_root}",
            f"--exec-root={STATE_DIR / 'exec'}",
            f"--pidfile={STATE_DIR / 'dockerd.pid'}",
            f"--config-file={config}",
            f"--bridge={BRIDGE}",
            "--iptables=false",
            "--ip-masq=false",
            "--ip-forward=false",
            "--log-level=warn",
        ],
        log=log,
        own_session=True,
    )
    deadline = time.monotonic() + _READY_SECONDS
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-15:]
            raise LocalError(f"dockerd exited {daemon.returncode} at start:\n" + "\n".join(tail))
        if SOCKET.exists() and run(["docker", "version"], env=docker_environment(), check=False).returncode == 0:
            return daemon.pid
        time.sleep(0.25)
    raise LocalError(f"dockerd did not answer on {DOCKER_HOST} within {_READY_SECONDS} s (its log: {log})")


def _recorded() -> dict[str, str]:
    with contextlib.suppress(OSError, ValueError):
        return {key: str(value) for key, value in json.loads(_ENGINE_FILE.read_text()).items()}
    return {}


def _daemon_pid(recorded: dict[str, str]) -> int | None:
    for candidate in (recorded.get("pid"), _read(STATE_DIR / "dockerd.pid")):
        if candidate and candidate.isdigit() and _cmdline(int(candidate)).startswith("dockerd"):
            return int(candidate)
    return None


def _terminate(pids: list[int], seconds: float) -> None:
    """SIGTERM, then SIGKILL what is still there after `seconds`."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Running (a zombie, which a parent has not reaped yet, is not), as far as this process can tell."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return False
    status = _read(Path(f"/proc/{pid}/stat"))
    return bool(status) and status.rsplit(")", 1)[-1].split()[0] != "Z"


def _program(pid: int) -> str:
    words = _cmdline(pid).split()
    return Path(words[0]).name if words else ""


def _cmdline(pid: int) -> str:
    return _read(Path(f"/proc/{pid}/cmdline")).replace("\0", " ").strip()


def _read(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")
    return ""


def _own_mounts() -> list[str]:
    """Mount points under STATE_DIR or the daemon's data root (a container's filesystem, its namespaces)."""
    roots = (str(STATE_DIR) + "/", str(cache_dir() / "docker") + "/")
    points = [line.split()[1] for line in _read(Path("/proc/self/mounts")).splitlines() if len(line.split()) > 1]
    return [point for point in points if point.startswith(roots)]
