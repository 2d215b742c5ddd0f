"""Hypothesis strategies for the broker's records: property names and values, and whole
message records of every shape (v1 and v2 topics, IPv4 and IPv6 hosts, any flags)."""

from __future__ import annotations

import ipaddress

from hypothesis import strategies as st

from tieredstore.formats.record import HostPort, MessageRecord

__all__ = ["V4", "V6", "hosts", "names", "records"]

V4 = HostPort(ipaddress.IPv4Address("192.168.0.7"), 10911)
V6 = HostPort(ipaddress.IPv6Address("fd00::7"), 10911)

hosts = st.sampled_from([V4, V6])
names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00\x01\x02"), max_size=20
)


@st.composite
def records(draw: st.DrawFn) -> MessageRecord:
    props = draw(st.dictionaries(names.filter(bool), names, max_size=5))
    topic = draw(st.sampled_from(["T", "%RETRY%g", "t" * 127, "v2-" + "x" * 200]))
    return MessageRecord.build(
        topic=topic,
        body=draw(st.binary(max_size=600)),
        queue_id=draw(st.integers(0, 1023)),
        queue_offset=draw(st.integers(0, 2**62)),
        physical_offset=draw(st.integers(0, 2**62)),
        store_timestamp=draw(st.integers(0, 2**42)),
        born_timestamp=draw(st.integers(0, 2**42)),
        properties=props,
        sys_flag=draw(st.integers(0, 0x7FF)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        born_host=draw(hosts),
        store_host=draw(hosts),
        reconsume_times=draw(st.integers(0, 16)),
        prepared_transaction_offset=draw(st.integers(0, 2**40)),
    )
