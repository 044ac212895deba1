"""Which registries the image checks may read, over what, and at which addresses.

An image reference is a tenant's input: without a policy it would make the operator connect
anywhere its pod can reach (the API server's Service, a cloud metadata address, another
team's internal service) and tell the tenant what it found. So every host the client is
about to talk to (the registry, each hop of a redirect, a token service) goes through one
policy, decided here from data:

- the host must be a host name or IP literal with an optional port: nothing a URL parser
  could read as a path, query, fragment or user (``?``, ``#``, ``@``, ``/``, ``%``, spaces);
- with an allow-list (``--allowed-registries``, host[:port] globs), the host must match it;
- whatever the list, a host that is not listed by name (in the allow-list or as insecure)
  may only be reached at a global unicast address: loopback, private, link-local, carrier
  NAT, multicast, reserved and unspecified addresses are refused. The addresses are checked
  after resolution and the connection goes to the address that was checked, so a name that
  resolves differently the second time (DNS rebinding) cannot slip through;
- plain HTTP only for hosts listed as insecure (``--insecure-registry``).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Final

from wcow_contract.text import shown

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_HOSTPORT = re.compile(r"(?P<host>\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?")
_PATTERN = re.compile(r"(?:\[[0-9a-f:.*?]+\]|[a-z0-9.*?-]+)(?::(?:[0-9]{1,5}|\*))?")
DEFAULT_PORTS: Final = {"https": 443, "http": 80}
MAX_HOST: Final = 253


class PolicyRefusal(Exception):  # noqa: N818 - turned into a LookupFailure by the client
    """A host the image checks may not read; ``message`` is safe to show the tenant."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


@dataclass(frozen=True)
class HostPort:
    """A registry host as written in a reference or a URL: ``host`` lower case (an IPv6
    literal without brackets), ``port`` None when none was written."""

    host: str
    port: int | None

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None

    def text(self) -> str:
        """As a reference or a Host header writes it (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    def port_for(self, scheme: str) -> int:
        return self.port if self.port is not None else DEFAULT_PORTS[scheme]


def parse_hostport(text: str) -> HostPort:
    """``text`` as a registry host[:port]; PolicyRefusal("Malformed") for anything else."""
    match = _HOSTPORT.fullmatch(text.lower()) if len(text) <= MAX_HOST + 8 else None
    if match is None:
        raise PolicyRefusal("Malformed", f"{shown(text, 80)} is not a registry host[:port]")
    host, port = match.group("host"), match.group("port")
    if host.startswith("["):
        host = host[1:-1]
        valid = _is_ip(host) and ":" in host
    else:
        valid = _is_ip(host) or (_HOSTNAME.fullmatch(host) is not None and len(host) <= MAX_HOST)
    number = int(port) if port is not None else None
    if not valid or (number is not None and not 0 < number < 65536):
        raise PolicyRefusal("Malformed", f"{shown(text, 80)} is not a registry host[:port]")
    return HostPort(host, number)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def check_pattern(pattern: str) -> str:
    """An allow-list entry, lower case; ValueError naming it when it is not host[:port]
    with ``*`` and ``?`` wildcards (``[::1]`` for IPv6, ``:*`` for any port)."""
    text = pattern.strip().lower()
    if not _PATTERN.fullmatch(text) or len(text) > MAX_HOST + 8:
        raise ValueError(
            f"{pattern!r} is not a registry pattern: host[:port] with * and ? wildcards "
            "(e.g. registry.example.com, *.example.com, registry.corp:5000, registry.corp:*)"
        )
    return text


@dataclass(frozen=True)
class RegistryPolicy:
    allowed: tuple[str, ...] = ()
    """host[:port] glob patterns (``check_pattern``); empty: any host at a global address."""
    insecure: frozenset[str] = field(default_factory=frozenset)
    """host[:port] read over plain HTTP (and trusted at any address, as listed by name)."""

    def scheme(self, where: HostPort) -> str:
        return "http" if self._insecure(where) else "https"

    def _insecure(self, where: HostPort) -> bool:
        return where.text() in self.insecure

    def listed(self, where: HostPort) -> bool:
        """Named by the administrator: in the allow-list or the insecure list."""
        if self._insecure(where):
            return True
        return any(fnmatch.fnmatchcase(where.text(), p) for p in self.allowed)

    def check_host(self, where: HostPort) -> None:
        """Before any name resolution: the allow-list, and IP literals' addresses."""
        if self.allowed and not self.listed(where):
            raise PolicyRefusal(
                "NotAllowed",
                f"registry {shown(where.text(), 80)} is not one this cluster's image checks "
                "may read (the operator's --allowed-registries)",
            )
        if where.ip is not None:
            self.check_address(where, str(where.ip))

    def check_address(self, where: HostPort, address: str) -> None:
        """Before connecting: a host not listed by name is reached only at a global unicast
        address."""
        if self.listed(where):
            return
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if ip.is_global and not ip.is_multicast:
            return
        raise PolicyRefusal(
            "NotAllowed",
            f"registry {shown(where.text(), 80)} is not at a public address; the image checks "
            "read a private, loopback or link-local address only for registries the cluster's "
            "administrator lists (--allowed-registries)",
        )
