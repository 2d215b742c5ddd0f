"""The broker's config files: fastjson's unquoted integer keys, read and written back."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tieredstore.errors import CorruptDataError
from tieredstore.formats import fastjson_dialect

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "golden_store" / "config"


def test_real_broker_output_reads_with_integer_keys() -> None:
    raw = (GOLDEN / "consumerOffset.json").read_bytes()
    assert b"{0:5,1:8" in raw  # what the broker wrote: not strict JSON
    doc = fastjson_dialect.loads(raw)
    ((name, offsets),) = doc["offsetTable"].items()
    assert name.startswith("TieredStoreRetrySource@GID_tieredstore_conformance_")
    assert offsets == {0: 5, 1: 8, 2: 9, 3: 8}
    assert all(type(k) is int for k in offsets)
    assert doc["dataVersion"]["counter"] == 0


def test_topics_json_reads_and_round_trips() -> None:
    doc = fastjson_dialect.loads((GOLDEN / "topics.json").read_bytes())
    assert doc["topicConfigTable"]["TieredStorePayments"]["readQueueNums"] == 4
    assert fastjson_dialect.loads(fastjson_dialect.dumps(doc)) == doc


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a@g":{0:5,1:8}}', {"a@g": {0: 5, 1: 8}}),
        ('{"offsetTable":{-1:3}}', {"offsetTable": {-1: 3}}),
        ('{"0":1}', {"0": 1}),  # a quoted key stays a string
        ('{"n":1.5e3,"t":true,"f":false,"x":null,"l":[1,"\\u00fc"]}',
         {"n": 1500.0, "t": True, "f": False, "x": None, "l": [1, "ü"]}),
        (' { } ', {}),
    ],
)  # fmt: skip
def test_loads(text: str, value: object) -> None:
    assert fastjson_dialect.loads(text) == value


@pytest.mark.parametrize("text", ["{0x1:2}", "{a:1}", '{"a":1} x', '{"a":}', '{"a" 1}', "[1,", ""])
def test_bad_input_names_where(text: str) -> None:
    with pytest.raises(CorruptDataError, match=r"at line 1 \(char \d+\) \(f.json\)"):
        fastjson_dialect.loads(text, where="f.json")


def test_dumps_writes_the_brokers_dialect() -> None:
    out = fastjson_dialect.dumps({"offsetTable": {"t@g": {0: 5}}, "s": "ü"})
    assert out == '{\n\t"offsetTable":{\n\t\t"t@g":{\n\t\t\t0:5\n\t\t}\n\t},\n\t"s":"ü"\n}'.encode()


_KEYS = st.one_of(st.integers(-(2**31), 2**31 - 1), st.text(max_size=8))
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=20,
)


@given(_VALUES)
def test_round_trip(value: object) -> None:
    assert fastjson_dialect.loads(fastjson_dialect.dumps(value)) == value
