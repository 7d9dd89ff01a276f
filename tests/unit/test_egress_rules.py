"""Egress decisions: the addresses a team's http jobs reach, the topics its kafka jobs write."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from kairos.services.executor.egress import (
    HttpAllow,
    HttpAllowError,
    http_refusal_reason,
    internal_kind,
    refused_address,
    topic_refusal_reason,
    unscoped,
)
from kairos.streams.kafka.topics import TopicLayout

LAYOUT = TopicLayout()
"""The default deployment: prefix `kairos.`."""


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.5.5.5", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fc00::1", "private"),
        ("fd00:ec2::254", "private"),  # the AWS metadata service over IPv6
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("fec0::1", "site-local"),
        ("::ffff:127.0.0.1", "loopback, as 127.0.0.1 inside an IPv6 address"),
        ("::ffff:169.254.169.254", "link-local"),
        ("::ffff:10.0.0.1", "private, as 10.0.0.1"),
        ("::a9fe:a9fe", "link-local"),  # IPv4-compatible 169.254.169.254
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 of 169.254.169.254
    ],
)
def test_internal_addresses_are_named_by_their_kind(address: str, kind: str) -> None:
    found = internal_kind(ip_address(address))
    assert found is not None, f"{address} passed as public"
    assert found.startswith(kind), found


@pytest.mark.parametrize(
    "address",
    # Ranges whose exact name varies with the Python version's tables; each is refused.
    ["240.0.0.1", "255.255.255.255", "198.18.0.1", "192.0.2.1", "2001:db8::1", "100::1"],
)
def test_other_special_purpose_ranges_are_refused(address: str) -> None:
    assert internal_kind(ip_address(address)) is not None


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "100.128.0.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    ],
)
def test_public_addresses_are_not_internal(address: str) -> None:
    assert internal_kind(ip_address(address)) is None


@pytest.mark.parametrize(
    ("entries", "host", "address", "admitted"),
    [
        (["10.20.0.0/16"], "billing.internal", "10.20.1.2", True),
        (["10.20.0.0/16"], "billing.internal", "10.21.0.1", False),
        (["10.20.1.2"], "billing.internal", "10.20.1.2", True),
        (["10.20.1.2"], "billing.internal", "10.20.1.3", False),
        (["10.20.1.0/24"], "x", "10.20.1.77", True),  # host bits set: the network is meant
        (["fd00::/8"], "metadata", "fd00:ec2::254", True),
        (["fd00::/8"], "metadata", "fc00::1", False),
        (["127.0.0.0/8"], "localhost", "::ffff:127.0.0.1", True),  # mapped: its IPv4 counts
        (["::ffff:127.0.0.1/128"], "localhost", "::ffff:127.0.0.1", True),
        (["Billing.Internal."], "billing.internal", "10.9.9.9", True),  # names: any case, dot
        (["billing.internal"], "BILLING.internal.", "fe80::1", True),
        (["billing.internal"], "other.internal", "10.9.9.9", False),
        ([], "billing.internal", "10.9.9.9", False),
    ],
)
def test_http_allow_admits_its_networks_and_host_names(
    entries: list[str], host: str, address: str, admitted: bool
) -> None:
    assert HttpAllow.parse(entries).admits(host, ip_address(address)) is admitted


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "fe80::zz", "10.0.0.0/8/8", " "])
def test_http_allow_entries_that_are_neither_network_nor_name_are_refused(entry: str) -> None:
    with pytest.raises(HttpAllowError, match=r"neither a network .* nor a host name") as refused:
        HttpAllow.parse(["10.0.0.0/8", entry])
    assert repr(entry) in str(refused.value)


def test_one_internal_address_among_public_ones_refuses_the_host() -> None:
    addresses = [ip_address("93.184.215.14"), ip_address("10.0.0.7"), ip_address("2606::1")]
    refusal = refused_address("mixed.example", addresses, HttpAllow.parse([]))
    assert refusal is not None
    assert (str(refusal.address), refusal.kind) == ("10.0.0.7", "private")
    assert refused_address("mixed.example", addresses, HttpAllow.parse(["10.0.0.0/24"])) is None
    assert refused_address("mixed.example", addresses[::2], HttpAllow.parse([])) is None


def test_scoped_ipv6_answers_are_checked_without_their_zone() -> None:
    assert internal_kind(unscoped("fe80::1%eth0")) == internal_kind(ip_address("fe80::1"))


def test_the_http_refusal_says_which_address_and_where_to_allow_it() -> None:
    refusal = refused_address(
        "metadata.internal", [ip_address("169.254.169.254")], HttpAllow.parse([])
    )
    assert refusal is not None
    assert http_refusal_reason(
        "http://metadata.internal/x", "metadata.internal", refusal, "growth"
    ) == (
        "request to http://metadata.internal/x refused: metadata.internal resolves to "
        "169.254.169.254 (link-local, the cloud metadata service's range), which team "
        "growth's http jobs may not reach; to allow it, an administrator adds 169.254.169.254/32 "
        "(or a network containing it, or the host name metadata.internal) to "
        "teams.growth.http_allow in the executor's runtime policy (--runtime-policy)"
    )
    assert "runs without an owner may not reach" in http_refusal_reason("u", "h", refusal, None)
    assert "to default.http_allow" in http_refusal_reason("u", "h", refusal, None)


@pytest.mark.parametrize(
    ("topic", "owner", "patterns", "allowed"),
    [
        ("growth.signups", "growth", (), True),  # the team's own namespace
        ("growth.", "growth", (), True),
        ("growthx.signups", "growth", (), False),  # another team's, however alike
        ("growth", "growth", (), False),
        ("payments.refunds", "growth", (), False),
        ("payments.refunds", "growth", ("payments.*",), True),
        ("payments.refunds", "growth", ("payments.refunds",), True),
        ("payments.refunds.dlq", "growth", ("payments.refunds",), False),  # a name is exact
        ("payments.refunds.dlq", "growth", ("payments.refunds*",), True),
        ("anything", "growth", ("*",), True),
        ("shared.events", None, ("shared.events",), True),
        ("growth.signups", None, (), False),  # no owner, no namespace
        ("shared.other", None, ("shared.events",), False),
    ],
)
def test_kafka_jobs_write_their_namespace_and_the_listed_topics(
    topic: str, owner: str | None, patterns: tuple[str, ...], allowed: bool
) -> None:
    assert (topic_refusal_reason(topic, owner, patterns, LAYOUT) is None) is allowed


def test_the_topic_refusal_says_what_the_team_may_write_and_who_widens_it() -> None:
    assert topic_refusal_reason("payments.refunds", "growth", (), LAYOUT) == (
        "team growth may not write topic payments.refunds; its kafka jobs write growth.* and "
        "the topics an administrator lists in teams.growth.kafka_topics of the executor's "
        "runtime policy (now: none)"
    )
    assert topic_refusal_reason(
        "payments.refunds", "growth", ("ads.*", "shared.events"), LAYOUT
    ) == (
        "team growth may not write topic payments.refunds; its kafka jobs write growth.* and "
        "the topics an administrator lists in teams.growth.kafka_topics of the executor's "
        "runtime policy (now: ads.*, shared.events)"
    )
    assert topic_refusal_reason("growth.signups", None, (), LAYOUT) == (
        "a run without an owner may not write topic growth.signups; such runs write only the "
        "topics an administrator lists in default.kafka_topics of the executor's runtime "
        "policy (now: none); give the schedule an owner to write that team's <team>.* topics"
    )


@pytest.mark.parametrize(
    "topic",
    [
        "kairos.run-events",  # forged outcomes of any team's runs
        "kairos.runs",
        "kairos.dead-letters",
        "kairos.schedules",
        "kairos.anything-added-later",
        "__consumer_offsets",
        "__transaction_state",
    ],
)
def test_no_kafka_job_writes_kairos_or_kafka_topics_whatever_it_is_granted(topic: str) -> None:
    # A team named like the prefix, and a policy granting every topic: still refused.
    for owner, patterns in (("kairos", ()), ("growth", ("*",)), (None, ("*",))):
        reason = topic_refusal_reason(topic, owner, patterns, LAYOUT)
        assert reason is not None and reason.startswith(f"topic {topic} belongs to Kairos")


def test_with_no_prefix_the_roles_names_are_still_refused() -> None:
    bare = TopicLayout(prefix="")
    assert topic_refusal_reason("run-events", "growth", ("*",), bare) is not None
    assert topic_refusal_reason("growth.signups", "growth", (), bare) is None
