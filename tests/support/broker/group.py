"""A classic RocketMQ broker group for tests: a master and one slave, one broker name.

:func:`start_slave` starts a second broker beside a running :class:`LocalCluster`: the
same cluster and broker name, ``brokerId=1``, ``brokerRole=SLAVE``, its own store, logs
and ports, on the master's name server, from which it learns the master's HA address.
The slave replicates the master's commitlog byte for byte (same physical offsets) and
dispatches its own consume queues.

:func:`promote` is a classic group's failover, done by hand as an operator does it
(classic master/slave has no automatic failover): the slave is stopped cleanly and
started again on its own store as the master (``brokerId=0``, ``ASYNC_MASTER``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.support.broker.rocketmq import LocalCluster

__all__ = ["promote", "start_slave"]

_ROLE_KEYS = ("brokerId", "brokerRole", "haMasterAddress")


def _without_role(conf: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in conf if k not in _ROLE_KEYS)


def start_slave(master: LocalCluster, workdir: Path) -> LocalCluster:
    """Start a slave of ``master`` in ``workdir``; return when it has booted."""
    # No haMasterAddress: a 5.3.3 slave learns the master's HA address (brokerIP2 and
    # haListenPort) from the name server when it registers, and again if it changes.
    role = (("brokerId", "1"), ("brokerRole", "SLAVE"))
    settings = dataclasses.replace(
        master.settings, extra_conf=(*_without_role(master.settings.extra_conf), *role)
    )
    slave = LocalCluster(master.toolchain, workdir, settings)
    slave.start_replica_of(master)
    return slave


def promote(slave: LocalCluster, extra_conf: tuple[tuple[str, str], ...] = ()) -> None:
    """Stop ``slave`` cleanly and start it again on its store as the group's master, with
    ``extra_conf`` added to its ``broker.conf`` (e.g. the read plugin's lines)."""
    slave.stop_broker()
    master_role = (("brokerId", "0"), ("brokerRole", "ASYNC_MASTER"))
    slave.settings = dataclasses.replace(
        slave.settings,
        extra_conf=(*_without_role(slave.settings.extra_conf), *master_role, *extra_conf),
    )
    slave.restart_broker(rewrite_configs=True)
