"""The composition root: the one function that builds the sidecar's object graph.

The process edge (:func:`tieredstore.cli.sidecar.runtime.open_runtime`) opens what lives
outside the graph and must be closed — the cold store's backend, the hot store, the
catalogue — and chooses the clock, the metrics registry and the retry policy.
:func:`build_dispatcher` builds everything else from the settings, once:

* the :class:`~tieredstore.settings.in_force.SettingsInForce`, the one holder of the
  settings in force, handed to every part that reads a setting a ``SIGHUP`` reload may
  change (the dispatcher, discovery, the rounds, the compactor, the retention pass, the
  upload pacing and its gauge); they read it at each use, and a reload replaces its
  content, nothing else;
* the writer lease (:func:`lease_for`) and the upload pacing (a token bucket);
* the cold writer, whose uploads go through the paced backend;
* the retention pass and the config backup, run as the dispatcher's periodic and
  start-up jobs, and the compactor (batch slices rewritten as segments, batch objects
  deleted), a periodic job of its own (:func:`_compaction`);
* the broker group's :class:`~tieredstore.dispatcher.replicas.ReplicaGroup` (this replica's reports,
  the limit the other replicas set on the rounds);
* one :class:`~tieredstore.dispatcher.shared_state.SharedState`, the queue state the tiering parts
  share, handed explicitly to each of them;
* :class:`~tieredstore.dispatcher.discovery.Discovery`,
  :class:`~tieredstore.dispatcher.tiering.committer.SegmentCommitter`,
  :class:`~tieredstore.dispatcher.tiering.rounds.Rounds` (with its durability guard), the
  provenance writer, and the :class:`~tieredstore.dispatcher.dispatcher.Dispatcher` that composes
  them and only stores what it is given.

Nothing else constructs the dispatcher or its tiering parts (tests/repo/ holds this).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from tieredstore.backends.base import Backend
from tieredstore.backends.retry import RetryPolicy
from tieredstore.backends.throttled import ThrottledBackend
from tieredstore.clock import Clock
from tieredstore.cold.compressed.frames import FrameSettings
from tieredstore.cold.layout import lease_key
from tieredstore.dispatcher import stopped_file
from tieredstore.dispatcher.background_loops import Periodic
from tieredstore.dispatcher.discovery import Discovery
from tieredstore.dispatcher.dispatcher import Dispatcher
from tieredstore.dispatcher.lease.lease import Lease
from tieredstore.dispatcher.maintenance.config_backup import ConfigBackup
from tieredstore.dispatcher.maintenance.retention import Retention, StepHook
from tieredstore.dispatcher.metrics import Metrics
from tieredstore.dispatcher.replicas import ReplicaGroup
from tieredstore.dispatcher.shared_state import SharedState
from tieredstore.dispatcher.tiering.batch.compaction import CompactionReport, Compactor
from tieredstore.dispatcher.tiering.batch.sequence import BatchKeys
from tieredstore.dispatcher.tiering.batch.writer import BatchWriter
from tieredstore.dispatcher.tiering.cold_writer import ColdWriter
from tieredstore.dispatcher.tiering.committer import SegmentCommitter
from tieredstore.dispatcher.tiering.durability import DurabilityGuard
from tieredstore.dispatcher.tiering.provenance_writer import ProvenanceWriter
from tieredstore.dispatcher.tiering.rounds import OnCommitted, Rounds
from tieredstore.hot.store import HotStore
from tieredstore.metadata.catalogue import Catalogue
from tieredstore.ratelimit import TokenBucket
from tieredstore.settings.in_force import SettingsInForce
from tieredstore.settings.loader import Settings

__all__ = ["Assembly", "build_dispatcher", "lease_for"]

StartupJob = Callable[[], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Assembly:
    """What :func:`build_dispatcher` built that the sidecar's edge holds too."""

    dispatcher: Dispatcher
    retention: Retention
    #: The settings in force, which every part reads at each use and a reload replaces.
    in_force: SettingsInForce
    #: Paces segment uploads at ``tiering.max_bytes_per_second`` in force.
    upload_limit: TokenBucket
    #: Rewrites batch slices as segments.
    compactor: Compactor
    #: This sidecar's part in its broker group: the reports it publishes, the limit.
    group: ReplicaGroup
    config_backup: ConfigBackup | None = None


@dataclass(frozen=True, slots=True)
class _Outside:
    """What the edge opened and hands in (see the module docstring), and the holder of
    the settings in force built from ``settings``."""

    settings: Settings
    in_force: SettingsInForce
    backend: Backend
    hot: HotStore
    catalogue: Catalogue
    clock: Clock
    metrics: Metrics


def build_dispatcher(
    settings: Settings,
    *,
    backend: Backend,
    hot: HotStore,
    catalogue: Catalogue,
    clock: Clock,
    metrics: Metrics,
    retry: RetryPolicy,
    on_segment: OnCommitted | None = None,
    on_deletion_step: StepHook | None = None,
) -> Assembly:
    """Build the sidecar's object graph for ``settings`` on what the edge opened.

    Segment uploads (the cold writer's writes) go through ``backend`` paced by the
    ``tiering.max_bytes_per_second`` token bucket; lease, retention and provenance calls
    do not. ``retry`` is the cold writer's policy for its own retries;
    ``on_segment`` observes each committed segment, ``on_deletion_step`` each step of a
    segment deletion. Nothing is opened, started or acquired here.
    """
    in_force = SettingsInForce(settings)
    out = _Outside(settings, in_force, backend, hot, catalogue, clock, metrics)
    lease = lease_for(settings, backend, clock)
    upload_limit = TokenBucket(clock, lambda: in_force.tiering.max_bytes_per_second)
    metrics.upload_rate_limit.set_function(lambda: upload_limit.rate)
    paced = ThrottledBackend(backend, upload_limit, on_wait=metrics.upload_throttled.inc)
    writer = _cold_writer(out, paced, lease, retry)
    retention = Retention(
        hot=hot, backend=backend, catalogue=catalogue, lease=lease, clock=clock,
        in_force=in_force, metrics=metrics, on_step=on_deletion_step,
    )  # fmt: skip
    backup = _config_backup(settings, backend, lease, clock)
    periodic, startup = _jobs(settings, retention, backup)
    states = SharedState(stopped_path=settings.state.dir / stopped_file.FILE_NAME)
    keys = BatchKeys(
        backend=writer.backend, lease=lease, clock=clock, retry=writer.retry,
        cluster=settings.cold.cluster, broker=settings.cold.broker,
        known=catalogue.slices.referenced_batches,
    )  # fmt: skip
    compactor = Compactor(writer=writer, keys=keys, lock=states.lock, in_force=in_force)
    periodic.append(_compaction(settings, compactor, metrics))
    group = ReplicaGroup(
        hot=hot, backend=backend, settings=settings.group, cluster=settings.cold.cluster,
        broker=settings.cold.broker, clock=clock, metrics=metrics,
    )  # fmt: skip
    dispatcher = _dispatcher(out, keys, writer, states, on_segment, periodic, startup, group)
    return Assembly(dispatcher, retention, in_force, upload_limit, compactor, group, backup)


def _dispatcher(
    out: _Outside,
    keys: BatchKeys,
    writer: ColdWriter,
    states: SharedState,
    on_segment: OnCommitted | None,
    periodic: list[Periodic],
    startup: list[StartupJob],
    group: ReplicaGroup,
) -> Dispatcher:
    """The dispatcher and its tiering parts, all on one shared :class:`SharedState`."""
    settings, hot, catalogue, metrics = out.settings, out.hot, out.catalogue, out.metrics
    lease = keys.lease
    discovery = Discovery(
        hot=hot, catalogue=catalogue, metrics=metrics, in_force=out.in_force, states=states
    )
    committer = SegmentCommitter(
        catalogue=catalogue, lease=lease, writer=writer, metrics=metrics, states=states
    )
    batcher = BatchWriter(
        keys=keys, catalogue=catalogue, committer=committer, states=states, metrics=metrics
    )
    rounds = Rounds(
        hot=hot, clock=out.clock, metrics=metrics, in_force=out.in_force,
        spool_dir=settings.state.dir / "spool", guard=DurabilityGuard(hot, metrics, group),
        committer=committer, states=states, on_segment=on_segment, batcher=batcher,
    )  # fmt: skip
    return Dispatcher(
        hot=hot,
        catalogue=catalogue,
        lease=lease,
        writer=writer,
        clock=out.clock,
        in_force=out.in_force,
        metrics=metrics,
        states=states,
        discovery=discovery,
        rounds=rounds,
        provenance=ProvenanceWriter.for_writer(out.backend, lease, hot, writer, catalogue),
        periodic=periodic,
        startup=startup,
    )


def lease_for(settings: Settings, backend: Backend, clock: Clock) -> Lease:
    """The broker's writer lease as ``settings`` configure it (not acquired yet); the
    lease commands build theirs here too."""
    return Lease(
        backend,
        lease_key(settings.cold.cluster, settings.cold.broker),
        clock,
        renew_interval=settings.lease.renew_interval,
        allow_unconditional_writes=settings.cold.allow_unconditional_writes,
    )


def _cold_writer(out: _Outside, paced: Backend, lease: Lease, retry: RetryPolicy) -> ColdWriter:
    """The segment writer; its uploads go through ``paced``."""
    settings = out.settings
    return ColdWriter(
        paced,
        out.hot,
        out.catalogue,
        cluster=settings.cold.cluster,
        broker=settings.cold.broker,
        writer_id=lease.owner,
        clock=out.clock,
        batch_bytes=settings.tiering.read_batch_bytes,
        retry=retry,
        on_retry=lambda op: out.metrics.retries.labels(op).inc(),
        frames=(
            None
            if settings.cold.compression == "none"
            else FrameSettings(settings.cold.frame_size, settings.cold.compression_level)
        ),
        # zstd is CPU alone: no more threads than cores, nor than uploads at once.
        encode_threads=min(settings.tiering.concurrency, os.cpu_count() or 1),
    )


def _jobs(
    settings: Settings, retention: Retention, backup: ConfigBackup | None
) -> tuple[list[Periodic], list[StartupJob]]:
    """The dispatcher's periodic jobs and the jobs it runs once at start."""
    periodic = [Periodic("retention", settings.retention.interval, retention.run_pass)]
    startup: list[StartupJob] = [retention.resume]
    if backup is not None:
        periodic.append(Periodic("config backup", settings.config_backup.interval, backup.run_pass))
        startup.append(backup.run_pass_logged)
    return periodic, startup


#: The longest wait between two compaction passes.
_COMPACTION_INTERVAL_MAX = 300.0


def _compaction(settings: Settings, compactor: Compactor, metrics: Metrics) -> Periodic:
    """Compaction as a periodic job, every ``min(compact_after / 4, 5 min)``.

    Why that interval: a slice is due ``compact_after`` after its batch (1 h by
    default), so a quarter of it bounds how late it is rewritten to 25 % (and 5 min at
    most, the lag of a batch delete behind its grace); ``segment_max_age`` (60 s by
    default) would list ``_batches/`` and query the catalogue 4-60 times as often for
    work that is due once an hour. Read once, at build: a reload of ``compact_after``
    changes what is due, not how often it is looked at. The job runs a pass only while
    ``tiering.batching`` is on or slice rows are left (:meth:`Compactor.run_if_needed`,
    which reads the settings in force), and outside the catalogue lock, which the
    compactor takes around each catalogue swap: its uploads never hold up tiering.
    """
    interval = min(settings.tiering.compact_after / 4, _COMPACTION_INTERVAL_MAX)

    async def compact() -> CompactionReport | None:
        report = await compactor.run_if_needed()
        if report is not None:
            metrics.slices_compacted.inc(report.slices)
            metrics.batches_deleted.inc(len(report.batches_deleted))
        return report

    return Periodic("compaction", interval, compact, locked=False)


def _config_backup(
    settings: Settings, backend: Backend, lease: Lease, clock: Clock
) -> ConfigBackup | None:
    """The config backup job (None when ``config_backup.enabled`` is false)."""
    if not settings.config_backup.enabled:
        return None
    config_dir = settings.store.config_dir or settings.store.path / "config"
    return ConfigBackup(
        config_dir=Path(config_dir),
        backend=backend,
        lease=lease,
        clock=clock,
        cluster=settings.cold.cluster,
        broker=settings.cold.broker,
        history=settings.config_backup.history,
    )
