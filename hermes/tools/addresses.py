"""Which addresses an outbound fetch may reach: public ones, and the networks the
operator allows by name or CIDR (`web.allow_networks`). Pure: the web tools ask it of
every address a name resolves to and of literal addresses; the config checks its list."""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

NAMED_NETWORKS: dict[str, tuple[str, ...]] = {
    "loopback": ("127.0.0.0/8", "::1/128"),
    "private": ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"),
    "link-local": ("169.254.0.0/16", "fe80::/10"),
}


def parse_networks(entries: list[str]) -> list[IPNetwork]:
    """`web.allow_networks` as networks; ValueError naming a bad entry."""
    networks: list[IPNetwork] = []
    for entry in entries:
        named = NAMED_NETWORKS.get(entry.strip().lower())
        try:
            networks += [ipaddress.ip_network(n) for n in named or (entry.strip(),)]
        except ValueError:
            names = ", ".join(NAMED_NETWORKS)
            raise ValueError(f"{entry!r} is neither a network (CIDR) nor one of {names}") from None
    return networks


def refusal(address: IPAddress, allowed: list[IPNetwork]) -> str | None:
    """Why a fetch may not reach `address` (None: it may)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if any(address in network for network in allowed):
        return None
    for kind, test in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),  # documentation and reserved ranges too
    ):
        if test:
            return f"a {kind} address ({address})"
    if not address.is_global:  # shared (100.64/10), reserved, documentation ranges
        return f"an address that is not public ({address})"
    return None
