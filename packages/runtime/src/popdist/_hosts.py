"""Which host a `poprun` runs on, of how many, and where host 0's `poprun` listens.

Across hosts one `poprun` runs on each host and starts that host's instances. Each learns its place
from `poprun`'s own options, or else from a cluster environment that JAX's distributed runtime also
detects (`jax._src.clusters`), read the way JAX reads it:

- Open MPI (`mpirun`; first, as in JAX): `OMPI_MCA_orte_hnp_uri` present; hosts `OMPI_COMM_WORLD_SIZE`,
  this host `OMPI_COMM_WORLD_RANK`; host 0's address is the first address in `OMPI_MCA_orte_hnp_uri`
  (where mpirun runs), the port `(job id // 2**12) % 2**12 + 61440`, the job id being what precedes the
  first '.' of that URI.
- SLURM (an `srun` step): `SLURM_JOB_ID`, `SLURM_STEP_NODELIST`, `SLURM_NTASKS`, `SLURM_PROCID` and
  `SLURM_LOCALID` all set; hosts `SLURM_NTASKS`, this host `SLURM_PROCID`; host 0 the first node of
  `SLURM_STEP_NODELIST`, the port `SLURM_JOB_ID % 2**12 + 61440`.

As in JAX, `JAX_COORDINATOR_PORT` replaces a derived port. Each task of the job is one `poprun`, so
start one task per host (`srun --ntasks-per-node=1`, `mpirun --map-by ppr:1:node`).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

# The port of host 0's poprun when a host list names no other: the one JAX's Cloud TPU detection uses.
DEFAULT_PORT = 8482
# JAX's override of the coordinator port it derives from a cluster's job id.
PORT_VARIABLE = "JAX_COORDINATOR_PORT"
CLUSTERS = ("auto", "ompi", "slurm", "none")
# The most hosts a launch may have: a host list is expanded in memory, and a typo such as n[0-999999999]
# must be a clear error rather than a process that fills the memory.
MAX_HOSTS = 65536

_EPHEMERAL_BASE = 65535 - 2**12 + 1
# Set by Open MPI's mpirun (up to Open MPI 4) for the processes it starts, as JAX checks.
_OMPI_URI = "OMPI_MCA_orte_hnp_uri"


@dataclass(frozen=True)
class HostPlace:
    """This host's place in a launch: `host_index` of `num_hosts`, and host 0's poprun at `address`."""

    num_hosts: int
    host_index: int
    address: str | None  # host:port; None on a single host
    source: str  # what told us, for messages

    @property
    def coordinator_host(self) -> str:
        """The host part of `address` (host 0)."""
        if self.address is None:
            return "127.0.0.1"
        return split_address(self.address)[0]


def expand_hosts(text: str) -> list[str]:
    """The hosts of a PopRun or SLURM host list: 'a,b', 'node[001-003,7],gpu1' (ranges keep their width)."""
    hosts: list[str] = []
    for prefix, ranges, rest in re.findall(r"([^,\[]*)(?:\[([^\]]*)\])?([^,]*)", text):
        if not (prefix or ranges or rest):
            continue
        if not ranges:
            hosts.append(prefix + rest)
            _check_count(f"host list {text!r}", len(hosts))
            continue
        for part in ranges.split(","):
            low, _, high = part.strip().partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise ValueError(f"host list {text!r}: {part!r} is not a number or a range low-high")
            end = int(high) if high else int(low)
            if end < int(low):
                raise ValueError(f"host list {text!r}: range {part!r} runs backwards")
            # Counted before anything is expanded.
            _check_count(f"host list {text!r}", len(hosts) + end - int(low) + 1)
            hosts.extend(f"{prefix}{n:0{len(low)}d}{rest}" for n in range(int(low), end + 1))
    return hosts


def _check_count(what: str, count: int) -> None:
    if count > MAX_HOSTS:
        raise ValueError(f"{what} names {count} hosts, more than poprun takes ({MAX_HOSTS})")


def read_hostfile(path: str) -> list[str]:
    """The hosts of a PopRun hostfile: one a line; blank lines and '#' comments are skipped."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ValueError(f"cannot read the hostfile {path!r}: {e.strerror}") from None
    hosts = [h for line in lines if (h := line.split("#", 1)[0].strip())]
    if not hosts:
        raise ValueError(f"the hostfile {path!r} names no host")
    _check_count(f"the hostfile {path!r}", len(hosts))
    return hosts


def split_address(address: str) -> tuple[str, int]:
    """host and port of 'host:port' ('[v6]:port' too)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port_text)


def _port_override() -> int | None:
    text = os.environ.get(PORT_VARIABLE, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{PORT_VARIABLE}={text!r} is not a port number")
    return int(text)


def join_address(host: str, port: int) -> str:
    """'host:port' ('[v6]:port' for an IPv6 address)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _ompi() -> HostPlace | None:
    uri = os.environ.get(_OMPI_URI)
    if uri is None:
        return None
    match = re.search(r"tcp://(.+?)[,:]|tcp6://\[(.+?)[,\]]", uri)
    if match is None:
        raise ValueError(f"Open MPI: cannot find an address in {_OMPI_URI}={uri!r}")
    host = next(g for g in match.groups() if g is not None)
    port = _port_override()
    if port is None:
        port = (int(uri.split(".", 1)[0]) // 2**12) % 2**12 + _EPHEMERAL_BASE
    return HostPlace(
        int(os.environ["OMPI_COMM_WORLD_SIZE"]),
        int(os.environ["OMPI_COMM_WORLD_RANK"]),
        join_address(host, port),
        "Open MPI",
    )


def _slurm() -> HostPlace | None:
    needed = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
    if not all(name in os.environ for name in needed):
        return None
    port = _port_override()
    if port is None:
        port = int(os.environ["SLURM_JOB_ID"]) % 2**12 + _EPHEMERAL_BASE
    first = expand_hosts(os.environ["SLURM_STEP_NODELIST"])[0]
    return HostPlace(
        int(os.environ["SLURM_NTASKS"]), int(os.environ["SLURM_PROCID"]), join_address(first, port), "SLURM"
    )


def detect_cluster(cluster: str) -> HostPlace | None:
    """The place a cluster environment gives ('auto': the first of Open MPI and SLURM present; 'none': None)."""
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {CLUSTERS}, got {cluster!r}")
    if cluster == "none":
        return None
    for name, detect in (("ompi", _ompi), ("slurm", _slurm)):
        if cluster in ("auto", name) and (place := detect()) is not None:
            return place
    if cluster != "auto":
        raise ValueError(f"--cluster {cluster}: this process was not started by {cluster} (its variables are unset)")
    return None


def _this_host_in(hosts: list[str]) -> int | None:
    """The position of this machine's name in `hosts`, if exactly one entry names it."""
    names = {socket.gethostname(), socket.getfqdn()}
    names |= {n.split(".", 1)[0] for n in names}
    matches = [i for i, h in enumerate(hosts) if h in names or h.split(".", 1)[0] in names]
    return matches[0] if len(matches) == 1 else None


def resolve(
    hosts: list[str] | None,
    num_hosts: int | None,
    host_index: int | None,
    address: str | None,
    cluster: str,
) -> HostPlace:
    """This host's place: each of the given values wins, the rest come from the cluster environment.

    `hosts` is the host list (host 0 first), `address` host 0's poprun as host:port."""
    detected = detect_cluster(cluster)
    given = (hosts, num_hosts, host_index, address) != (None, None, None, None)
    source = detected.source if detected is not None else "the command line" if given else "this host"
    if hosts is not None and num_hosts is not None and num_hosts != len(hosts):
        raise ValueError(f"--num-hosts {num_hosts} does not match the {len(hosts)} hosts listed")
    count = len(hosts) if hosts is not None else num_hosts
    if count is None:
        count = detected.num_hosts if detected is not None else 1
    if not 0 < count <= MAX_HOSTS:
        raise ValueError(f"{count} hosts: poprun takes 1 to {MAX_HOSTS}")
    index = host_index
    if index is None and hosts is not None:
        index = 0 if len(hosts) == 1 else _this_host_in(hosts)
    if index is None and detected is not None:
        index = detected.host_index
    if index is None:
        index = 0 if count == 1 else None
    if index is None:
        raise ValueError(
            f"cannot tell which of the {count} hosts this is ({socket.gethostname()!r} is not exactly one of them): "
            "give --host-index"
        )
    if not 0 <= index < count:
        raise ValueError(f"host index {index} is not below the number of hosts, {count}")
    if address is not None:
        split_address(address)
    elif hosts is not None and count > 1:
        address = join_address(hosts[0], _port_override() or DEFAULT_PORT)
    elif detected is not None and count > 1:
        address = detected.address
    if count > 1 and address is None:
        raise ValueError(f"{count} hosts need host 0's address: give --coordinator-address host:port or --host")
    return HostPlace(count, index, address if count > 1 else None, source)
