"""Byte-exact codecs for the files of a RocketMQ broker store (see ROCKETMQ_FORMAT.md)."""
