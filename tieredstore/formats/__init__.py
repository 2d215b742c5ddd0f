"""Byte-exact codecs for the files of a RocketMQ broker store (see docs/format.md)."""
