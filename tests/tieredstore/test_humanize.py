"""The one ISO-8601 formatter (:func:`tieredstore.humanize.iso_time`) in each of its forms."""

from __future__ import annotations

from tieredstore.humanize import iso_time

MS = 1_700_000_123_456  # 2023-11-14T22:15:23.456 UTC


def test_whole_seconds_with_z_by_default_and_empty_for_none() -> None:
    assert iso_time(MS) == "2023-11-14T22:15:23Z"
    assert iso_time(None) == ""


def test_milliseconds_exactly_from_integer_milliseconds() -> None:
    assert iso_time(MS, timespec="milliseconds") == "2023-11-14T22:15:23.456Z"
    assert iso_time(MS, timespec="milliseconds", zulu=False) == "2023-11-14T22:15:23.456+00:00"
    assert iso_time(0, timespec="milliseconds") == "1970-01-01T00:00:00.000Z"
    assert iso_time(-1, timespec="milliseconds") == "1969-12-31T23:59:59.999Z"


def test_auto_shows_a_fraction_only_when_there_is_one() -> None:
    assert iso_time(MS - 456, timespec="auto", zulu=False) == "2023-11-14T22:15:23+00:00"
    assert iso_time(MS, timespec="auto", zulu=False) == "2023-11-14T22:15:23.456000+00:00"
