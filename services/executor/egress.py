"""What a team's jobs may reach: the addresses of its http jobs, the topics of its kafka jobs.

Pure decisions on the team's `TeamRuntime` (`runtime_policy`); `http_job` and `kafka_job` apply
them. An http job reaches the public internet; an address inside the executor's networks
(loopback, private, link-local such as the cloud metadata service, and every other
special-purpose range) only when the team's `http_allow` lists its network or the URL's host
name. A kafka job writes its team's namespace, `<team>.*`, and the topics its `kafka_topics`
lists; a run without an owner has no namespace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

from kairos.streams.kafka.topics import TopicLayout

IPAddress = IPv4Address | IPv6Address

_SHARED = IPv4Network("100.64.0.0/10")
_MAPPED = IPv6Network("::ffff:0:0/96")
_COMPATIBLE = IPv6Network("::/96")
_NAT64 = IPv6Network("64:ff9b::/96")
_SIXTOFOUR = IPv6Network("2002::/16")

# First match names the range; `is_private` also holds for loopback and link-local, so they
# come before it to give the more telling name.
_INTERNAL: tuple[tuple[str, Callable[[IPAddress], bool]], ...] = (
    ("unspecified", lambda a: a.is_unspecified),
    ("loopback", lambda a: a.is_loopback),
    ("link-local, the cloud metadata service's range", lambda a: a.is_link_local),
    ("carrier-grade NAT, 100.64.0.0/10", lambda a: a in _SHARED),
    ("private", lambda a: a.is_private),
    ("multicast", lambda a: a.is_multicast),
    ("reserved", lambda a: a.is_reserved),
    ("site-local", lambda a: isinstance(a, IPv6Address) and a.is_site_local),
    ("special-purpose, not globally reachable", lambda a: not a.is_global),
)


def embedded_ipv4(address: IPAddress) -> IPv4Address | None:
    """The IPv4 address an IPv6 one carries and reaches (mapped, compatible, NAT64, 6to4)."""
    if isinstance(address, IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if (address in _COMPATIBLE and not address.is_loopback and not address.is_unspecified) or (
        address in _NAT64
    ):
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def internal_kind(address: IPAddress) -> str | None:
    """What kind of internal address `address` is, or `None` when it is a public one."""
    embedded = embedded_ipv4(address)
    if embedded is not None:
        kind = internal_kind(embedded)
        return None if kind is None else f"{kind}, as {embedded} inside an IPv6 address"
    for kind, holds in _INTERNAL:
        if holds(address):
            return kind
    return None


class HttpAllowError(ValueError):
    """An `http_allow` entry is neither a network nor a host name."""


@dataclass(frozen=True)
class HttpAllow:
    """A team's `http_allow`, parsed: the networks and host names beyond the public internet."""

    networks: tuple[IPv4Network | IPv6Network, ...]
    names: frozenset[str]

    @classmethod
    def parse(cls, entries: Iterable[str]) -> HttpAllow:
        networks: list[IPv4Network | IPv6Network] = []
        names: set[str] = set()
        for entry in entries:
            try:
                networks.append(ip_network(entry.strip(), strict=False))
            except ValueError:
                # Only something meant as an address has `/` or `:`; a name never does.
                if "/" in entry or ":" in entry or not entry.strip():
                    raise HttpAllowError(
                        f"http_allow entry {entry!r} is neither a network (CIDR such as "
                        "10.20.0.0/16 or fd00::/8, or one address) nor a host name"
                    ) from None
                names.add(_host_key(entry))
        return cls(tuple(networks), frozenset(names))

    def admits(self, host: str, address: IPAddress) -> bool:
        """Whether `address` (which `host` resolved to) is allowed although internal."""
        if _host_key(host) in self.names:
            return True
        candidates = [address] + [a for a in [embedded_ipv4(address)] if a is not None]
        return any(a in network for a in candidates for network in self.networks)


def _host_key(host: str) -> str:
    # DNS names compare case-insensitively, and `host.` is the same name as `host`.
    return host.strip().lower().rstrip(".")


def unscoped(text: str) -> IPAddress:
    """The address of a resolved `sockaddr[0]`, without the `%zone` an IPv6 link-local has."""
    return ip_address(text.split("%", 1)[0])


@dataclass(frozen=True)
class Refusal:
    """An address a host resolved to that the team may not reach, and why."""

    address: IPAddress
    kind: str


def refused_address(host: str, addresses: Iterable[IPAddress], allow: HttpAllow) -> Refusal | None:
    """The first of `addresses` (all that `host` resolved to) that is internal and not allowed.

    Every address is checked, not just the one connected to: the connection may fall back to
    any of them.
    """
    for address in addresses:
        kind = internal_kind(address)
        if kind is not None and not allow.admits(host, address):
            return Refusal(address, kind)
    return None


def policy_place(owner: str | None, field: str) -> str:
    """Where in the runtime policy an administrator changes `field` for `owner`'s jobs."""
    return f"default.{field}" if owner is None else f"teams.{owner}.{field}"


def http_refusal_reason(url: str, host: str, refusal: Refusal, owner: str | None) -> str:
    """Why the request to `url` was not sent, and how an administrator allows it."""
    whose = "runs without an owner" if owner is None else f"team {owner}'s http jobs"
    network = f"{refusal.address}/{refusal.address.max_prefixlen}"
    return (
        f"request to {url} refused: {host} resolves to {refusal.address} ({refusal.kind}), "
        f"which {whose} may not reach; to allow it, an administrator adds {network} "
        f"(or a network containing it, or the host name {host}) to "
        f"{policy_place(owner, 'http_allow')} in the executor's runtime policy "
        "(--runtime-policy)"
    )


def topic_matches(topic: str, patterns: Iterable[str]) -> bool:
    """Whether `topic` is one of `patterns`: a name, or a prefix ending in `*`."""
    return any(
        topic.startswith(pattern[:-1]) if pattern.endswith("*") else topic == pattern
        for pattern in patterns
    )


def topic_refusal_reason(
    topic: str, owner: str | None, patterns: tuple[str, ...], layout: TopicLayout
) -> str | None:
    """Why `owner`'s kafka job may not write `topic`, or `None` when it may."""
    if layout.reserves(topic):
        return (
            f"topic {topic} belongs to Kairos (this deployment's prefix {layout.prefix!r}) or to "
            "Kafka: no job writes it, whatever its team's namespace or the runtime policy lists; "
            "write a topic of your team's namespace instead"
        )
    if owner is not None and topic.startswith(f"{owner}."):
        return None
    if topic_matches(topic, patterns):
        return None
    listed = f" (now: {', '.join(patterns)})" if patterns else " (now: none)"
    place = policy_place(owner, "kafka_topics")
    if owner is None:
        return (
            f"a run without an owner may not write topic {topic}; such runs write only the "
            f"topics an administrator lists in {place} of the executor's runtime policy"
            f"{listed}; give the schedule an owner to write that team's <team>.* topics"
        )
    return (
        f"team {owner} may not write topic {topic}; its kafka jobs write {owner}.* and the "
        f"topics an administrator lists in {place} of the executor's runtime policy{listed}"
    )
