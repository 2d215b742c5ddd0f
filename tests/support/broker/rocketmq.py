"""Run a real Apache RocketMQ name server and broker on 127.0.0.1 for tests and benchmarks.

The jars come from Maven Central through the test-only ``tests/broker/pom.xml``
(``mvn dependency:copy-dependencies``) into a cache that survives between runs:
``$TIEREDSTORE_CACHE/rocketmq-<version>/`` (``TIEREDSTORE_CACHE`` defaults to
``~/.cache/tieredstore``). The same directory holds the compiled ``BrokerTool`` (the
Java producer/consumer/admin client in ``tests/broker/java/``; both files are read from
the source checkout), keyed by a hash of its
source. Both steps are skipped when their stamp matches, so only the first run is slow.

:class:`LocalCluster` starts ``NamesrvStartup`` and ``BrokerStartup`` as subprocesses
with free ports, a tmp store and tmp logs, waits until both report "boot success", and
stops them with SIGTERM (then SIGKILL) — from its ``stop()``, its context manager, or an
``atexit`` hook, whichever comes first. Each JVM also runs under a small shell watchdog
that SIGTERMs it when the pipe to its stdin closes, so even a test process killed with
SIGKILL leaves no JVM behind.

Broker ports: the broker listens on ``listen_port`` and derives the HA port (+1) and
the fast-remoting port (-2) from it; all of ``listen_port - 2 .. listen_port + 1`` are
checked free.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tests.support.cache import cache_lock, cache_root

__all__ = [
    "BrokerOffsets",
    "BrokerSettings",
    "HarnessError",
    "LocalCluster",
    "Toolchain",
    "missing_tools",
    "prepare_toolchain",
    "rocketmq_version",
    "wait_until",
]

#: The test POM and the Java client stay with the broker tests; this module (shared with
#: ``bench/``) reads them from the source checkout, as it builds ``broker-plugin/``.
HERE = Path(__file__).resolve().parents[3] / "tests" / "broker"
POM = HERE / "pom.xml"
TOOL_SOURCE = HERE / "java" / "BrokerTool.java"
TOOL_CLASS = "BrokerTool"

#: Small heaps and a cheap JIT: two JVMs plus a client on a 2-core machine.
SERVER_JVM_OPTS = ("-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
CLIENT_JVM_OPTS = ("-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
BOOT_MARKER = "boot success"


class HarnessError(RuntimeError):
    """The broker harness could not prepare, start, drive or stop the JVMs."""


def missing_tools() -> list[str]:
    """Return which of ``java``, ``javac`` and ``mvn`` are not on PATH."""
    return [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]


def rocketmq_version() -> str:
    """Return ``rocketmq.version`` from the test POM (the one place it is pinned)."""
    match = re.search(r"<rocketmq\.version>([^<]+)</rocketmq\.version>", POM.read_text())
    if match is None:
        raise HarnessError(f"no <rocketmq.version> property in {POM}")
    return match.group(1).strip()


def wait_until(predicate: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll ``predicate`` until it holds; raise HarnessError naming ``what`` at the deadline.

    This waits on an external process (the broker) whose progress we cannot observe
    any other way; nothing in our own code is synchronised by it.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def _without_logback_status(lines: list[str]) -> list[str]:
    """``lines`` without the configuration status the shaded logback prints first."""
    return [t for t in lines if "|-INFO" not in t and "|-WARN" not in t]


def _run(cmd: list[str], *, timeout: float, what: str, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise HarnessError(f"{what} timed out after {timeout:.0f}s") from exc
    if done.returncode != 0:
        tail = "\n".join(_without_logback_status(done.stdout.splitlines())[-40:])
        raise HarnessError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def _sha256(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Toolchain:
    """Resolved RocketMQ jars and the compiled BrokerTool."""

    version: str
    lib_dir: Path
    classes_dir: Path
    #: More jars on every JVM's classpath (the broker read plugin).
    extra_jars: tuple[Path, ...] = ()

    @property
    def classpath(self) -> str:
        return os.pathsep.join([str(self.classes_dir), *map(str, self.extra_jars),
                                str(self.lib_dir / "*")])  # fmt: skip


def _resolve_jars(base: Path, version: str) -> Path:
    lib = base / "lib"
    stamp = lib / ".pom-sha256"
    digest = _sha256(POM.read_bytes(), version.encode())
    if stamp.is_file() and stamp.read_text().strip() == digest:
        return lib
    base.mkdir(parents=True, exist_ok=True)
    staging = base / f"lib.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    _run(
        [
            "mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
            f"-Drocketmq.version={version}",
        ],
        timeout=540,  # below pytest-timeout (600 s), so the failure names mvn
        what="mvn dependency:copy-dependencies (RocketMQ jars)",
    )  # fmt: skip
    (staging / ".pom-sha256").write_text(digest + "\n")
    shutil.rmtree(lib, ignore_errors=True)
    staging.rename(lib)
    return lib


def _compile_tool(base: Path, lib: Path, version: str) -> Path:
    source = TOOL_SOURCE.read_bytes()
    out = base / f"tool-{_sha256(source, version.encode())}"
    if (out / f"{TOOL_CLASS}.class").is_file():
        return out
    staging = base / f"tool.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _run(
        ["javac", "-encoding", "UTF-8", "-cp", str(lib / "*"), "-d", str(staging),
         str(TOOL_SOURCE)],
        timeout=300,
        what="javac BrokerTool.java",
    )  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    for stale in base.glob("tool-*"):  # builds of older sources
        if stale != out:
            shutil.rmtree(stale, ignore_errors=True)
    return out


def prepare_toolchain(version: str | None = None) -> Toolchain:
    """Resolve the jars and compile the tool (cached; see the module docstring).

    ``version``: another RocketMQ release than the test POM's (``-Drocketmq.version``),
    cached beside it in ``rocketmq-<version>/``.
    """
    version = version or rocketmq_version()
    base = cache_root() / f"rocketmq-{version}"
    with cache_lock():
        lib = _resolve_jars(base, version)
        return Toolchain(version, lib, _compile_tool(base, lib, version))


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """The store geometry and names a test broker runs with.

    Small files so a few MiB of traffic roll several commitlog and CQ files. The
    CQ size must be a multiple of 20 (the broker would round it up otherwise).
    """

    commitlog_file_size: int = 1 << 20
    cq_file_size: int = 200 * 20
    max_message_size: int = 512 << 10
    cluster: str = "TieredStoreTestCluster"
    broker_name: str = "broker-a"
    #: ``SYNC_FLUSH`` (producers wait for the flush) or ``ASYNC_FLUSH`` (RocketMQ's
    #: default: FlushRealTimeService flushes every 500 ms / thoroughly every 10 s).
    flush_disk_type: str = "SYNC_FLUSH"
    #: More ``broker.conf`` lines (key, value), applied last (they override the above).
    extra_conf: tuple[tuple[str, str], ...] = ()
    #: Java system properties (name, value) of the broker's JVM, e.g. RocketMQ's socket
    #: buffer sizes (``com.rocketmq.remoting.socket.sndbuf.size``), which its HA link reads.
    jvm_properties: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.cq_file_size % 20:
            raise ValueError(f"cq_file_size {self.cq_file_size} is not a multiple of 20")
        if self.max_message_size >= self.commitlog_file_size:
            raise ValueError("max_message_size must be below commitlog_file_size")


@dataclass(frozen=True, slots=True)
class BrokerOffsets:
    """What the broker itself reports for one queue (admin getTopicStatsInfo)."""

    topic: str
    queue_id: int
    min: int
    max: int


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


#: Below Linux's ephemeral range (32768+), so no outgoing connection takes our port
#: between the check and the JVM's bind; above the RocketMQ defaults (9876, 10911).
_PORT_RANGE = (20000, 32000)


def _free_port_block(below: int, above: int) -> int:
    """Return a port p with p-below .. p+above all free on 127.0.0.1."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(_PORT_RANGE[0] + below, _PORT_RANGE[1] - above)
        if all(_port_free(p) for p in range(port - below, port + above + 1)):
            return port
    raise HarnessError(f"found no block of free ports in {_PORT_RANGE} on 127.0.0.1")


#: ``sh -c`` script run as ``sh -c SCRIPT NAME JAVA-ARGS...``: runs the command, and
#: SIGTERMs it when stdin reaches EOF; exits with the command's status.
_WATCHDOG = """
exec 3<&0
"$@" </dev/null &
child=$!
( read -r _ <&3; kill -TERM "$child" 2>/dev/null ) &
watcher=$!
wait "$child"
status=$?
kill "$watcher" 2>/dev/null
exit "$status"
"""

_LIVE: set[LocalCluster] = set()


@atexit.register
def _stop_all() -> None:
    for cluster in list(_LIVE):
        cluster.stop()


class LocalCluster:
    """One name server and one broker (``brokerId=0``, master) in ``workdir``.

    Layout: ``workdir/store`` (storePathRootDir), ``workdir/logs`` (stdout of each JVM
    and the RocketMQ log files), ``workdir/home`` (ROCKETMQ_HOME and user.home of the
    JVMs, so nothing is written to the real home directory).
    """

    def __init__(self, toolchain: Toolchain, workdir: Path, settings: BrokerSettings) -> None:
        self.toolchain = toolchain
        self.settings = settings
        self.workdir = workdir
        self.store_root = workdir / "store"
        self.log_dir = workdir / "logs"
        self.home = workdir / "home"
        self.namesrv_port = 0
        self.broker_port = 0
        self._namesrv: subprocess.Popen[bytes] | None = None
        self._broker: subprocess.Popen[bytes] | None = None

    # -- addresses ----------------------------------------------------------------
    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def running(self) -> bool:
        return self._broker is not None and self._broker.poll() is None

    # -- lifecycle ----------------------------------------------------------------
    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["ROCKETMQ_HOME"] = str(self.home)
        return env

    def _jvm(self, opts: tuple[str, ...]) -> list[str]:
        return [
            "java", *opts,
            f"-Duser.home={self.home}",
            f"-Drocketmq.log.root={self.log_dir}",
            "-cp", self.toolchain.classpath,
        ]  # fmt: skip

    def _broker_jvm(self) -> list[str]:
        props = tuple(f"-D{k}={v}" for k, v in self.settings.jvm_properties)
        return self._jvm((*SERVER_JVM_OPTS, *props))

    def _write_configs(self) -> tuple[Path, Path]:
        s = self.settings
        namesrv_conf = self.workdir / "namesrv.conf"
        namesrv_conf.write_text(f"listenPort={self.namesrv_port}\n")
        broker_conf = self.workdir / "broker.conf"
        lines = {
            "brokerClusterName": s.cluster,
            "brokerName": s.broker_name,
            "brokerId": "0",
            "brokerRole": "ASYNC_MASTER",
            "brokerIP1": "127.0.0.1",
            # The HA address the name server hands a slave of this broker (brokerIP2:haListenPort).
            "brokerIP2": "127.0.0.1",
            "listenPort": str(self.broker_port),
            "haListenPort": str(self.broker_port + 1),
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": str(self.store_root),
            "storePathCommitLog": str(self.store_root / "commitlog"),
            "mappedFileSizeCommitLog": str(s.commitlog_file_size),
            "mappedFileSizeConsumeQueue": str(s.cq_file_size),
            "maxMessageSize": str(s.max_message_size),
            "flushDiskType": s.flush_disk_type,
            "autoCreateTopicEnable": "false",
            # A loaded 2-core CI machine must slow the test down, not fail sends with
            # "broker busy" (fast failure drops requests queued over 200 ms by default).
            "brokerFastFailureEnable": "false",
            "osPageCacheBusyTimeOutMills": "10000",
            "syncFlushTimeout": "20000",
            # Never delete anything while a test runs, even on a fairly full disk.
            "fileReservedTime": "720",
            "diskMaxUsedSpaceRatio": "95",
            # Keep the (sparse, unused by us) index and timer files small.
            "maxHashSlotNum": "1000",
            "maxIndexNum": "4000",
            "mappedFileSizeTimerLog": str(1 << 20),
        }
        lines.update(dict(s.extra_conf))
        broker_conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        return namesrv_conf, broker_conf

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        out = (self.log_dir / f"{name}.out").open("wb")
        try:
            # Through _WATCHDOG: the JVM gets SIGTERM as soon as our end of its stdin
            # closes — on stop(), or when this process dies, however it dies. A session
            # of its own: the test runner's signals do not reach it, and stop() can
            # SIGKILL exactly this group.
            return subprocess.Popen(
                ["sh", "-c", _WATCHDOG, name, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                env=self._env(),
                start_new_session=True,
            )
        finally:
            out.close()

    def _wait_booted(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        out = self.log_dir / f"{name}.out"

        def booted() -> bool:
            if proc.poll() is not None:
                clash = "Address already in use" in out.read_text(errors="replace")
                raise HarnessError(
                    f"{name} exited with {proc.returncode} during start"
                    f"{' (Address already in use)' if clash else ''}\n{self.log_tail()}"
                )
            return BOOT_MARKER in out.read_text(errors="replace")

        try:
            wait_until(booted, timeout=90, what=f"{name} to boot")
        except HarnessError as exc:
            raise HarnessError(f"{exc}\n{self.log_tail()}") from exc

    def start(self) -> None:
        """Start the name server, then the broker; return when both have booted.

        A port another process took between our check and the JVM's bind makes the JVM
        exit with "Address already in use"; then we start over on other ports (3 tries).
        """
        for attempt in range(3):
            try:
                self._start_once()
                return
            except HarnessError as exc:
                if "Address already in use" not in str(exc) or attempt == 2:
                    raise
                shutil.rmtree(self.store_root, ignore_errors=True)

    def _start_once(self) -> None:
        for d in (self.store_root, self.log_dir, self.home):
            d.mkdir(parents=True, exist_ok=True)
        self.namesrv_port = _free_port_block(0, 0)
        self.broker_port = _free_port_block(2, 1)
        namesrv_conf, _broker_conf = self._write_configs()
        _LIVE.add(self)
        try:
            self._namesrv = self._spawn(
                "namesrv",
                [*self._jvm(SERVER_JVM_OPTS), "org.apache.rocketmq.namesrv.NamesrvStartup",
                 "-c", str(namesrv_conf)],
            )  # fmt: skip
            self._wait_booted("namesrv", self._namesrv)
            self._start_broker()
        except BaseException:
            self.stop()
            raise

    def start_replica_of(self, master: LocalCluster) -> None:
        """Start only a broker, on ``master``'s name server (a second replica of a group:
        its ``settings.extra_conf`` says ``brokerId``, ``brokerRole`` and the HA master);
        return when it has booted. :meth:`stop` then stops this broker only."""
        for d in (self.store_root, self.log_dir, self.home):
            d.mkdir(parents=True, exist_ok=True)
        self.namesrv_port = master.namesrv_port
        self.broker_port = _free_port_block(2, 1)
        self._write_configs()
        _LIVE.add(self)
        try:
            self._start_broker()
        except BaseException:
            self.stop()
            raise

    def _start_broker(self) -> None:
        broker_conf = self.workdir / "broker.conf"
        self._broker = self._spawn(
            "broker",
            [*self._broker_jvm(), "org.apache.rocketmq.broker.BrokerStartup",
             "-c", str(broker_conf), "-n", self.namesrv_addr],
        )  # fmt: skip
        self._wait_booted("broker", self._broker)

    def freeze_broker(self) -> None:
        """SIGSTOP the broker (its whole process group): it appends and flushes nothing
        more, the page cache keeps what it wrote — the instant of a power cut."""
        if self._broker is None or self._broker.poll() is not None:
            raise HarnessError("the broker is not running")
        os.killpg(self._broker.pid, signal.SIGSTOP)

    def thaw_broker(self) -> None:
        """SIGCONT a broker :meth:`freeze_broker` stopped."""
        if self._broker is not None and self._broker.poll() is None:
            os.killpg(self._broker.pid, signal.SIGCONT)

    def kill_broker(self) -> None:
        """SIGKILL the broker (frozen or not): no shutdown hook runs, so the store keeps
        its ``abort`` file and the next start recovers abnormally."""
        if self._broker is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._broker.pid, signal.SIGKILL)
        self._broker.wait(timeout=30)
        if self._broker.stdin is not None:
            self._broker.stdin.close()

    def restart_broker(self, *, rewrite_configs: bool = False) -> None:
        """Start the broker again on the same store, ports, name server and ``broker.conf``
        (``rewrite_configs``: anew from :attr:`settings`); returns once it has booted."""
        if self.running:
            raise HarnessError("the broker is still running; kill it first")
        if rewrite_configs:
            self._write_configs()
        self._start_broker()

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes] | None, grace: float) -> None:
        if proc is None:
            return
        if proc.stdin is not None and not proc.stdin.closed:
            proc.stdin.close()  # the watchdog sends SIGTERM: the JVM's shutdown hook runs
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # our own session: watchdog + JVM
            proc.wait(timeout=30)

    def stop_broker(self) -> None:
        """Stop the broker cleanly (SIGTERM runs its shutdown hook); idempotent."""
        self._terminate(self._broker, grace=60)

    def stop(self) -> None:
        """Stop the broker, then the name server (the broker unregisters from it)."""
        try:
            self.stop_broker()
        finally:
            self._terminate(self._namesrv, grace=20)
            _LIVE.discard(self)

    def start_broker_on(self, store_root: Path) -> None:
        """Start a broker (same name, same name server, fresh ports) on ``store_root``.

        The running broker, if any, is stopped first. Used to boot a broker on a
        restored store: the store is never wiped, even on a port clash (then we retry on
        other ports).
        """
        self.stop_broker()
        self.store_root = store_root
        for attempt in range(3):
            self.broker_port = _free_port_block(2, 1)
            _, broker_conf = self._write_configs()
            self._broker = self._spawn(
                "broker",
                [*self._broker_jvm(), "org.apache.rocketmq.broker.BrokerStartup",
                 "-c", str(broker_conf), "-n", self.namesrv_addr],
            )  # fmt: skip
            try:
                self._wait_booted("broker", self._broker)
                return
            except HarnessError as exc:
                if "Address already in use" not in str(exc) or attempt == 2:
                    raise

    def broker_exit_code(self) -> int | None:
        return None if self._broker is None else self._broker.poll()

    # -- driving it -----------------------------------------------------------------
    def run_tool(self, *args: str, timeout: float = 300) -> str:
        """Run ``BrokerTool`` with ``args``; raise HarnessError with logs on failure."""
        cmd = [*self._jvm(CLIENT_JVM_OPTS), TOOL_CLASS, *args]
        try:
            return _run(cmd, timeout=timeout, what=f"BrokerTool {args[0]}", env=self._env())
        except HarnessError as exc:
            raise HarnessError(f"{exc}\n{self.log_tail()}") from exc

    def spawn_tool(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        """Start ``BrokerTool`` with ``args`` in the background (output to ``log``); the
        caller waits for it or kills it."""
        cmd = [*self._jvm(CLIENT_JVM_OPTS), TOOL_CLASS, *args]
        with log.open("ab") as out:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self._env())

    def create_topics(self, topics: dict[str, int]) -> None:
        """Create topics with ``queues`` read and write queues each; wait for routes."""
        self.run_tool(
            "create-topics",
            self.namesrv_addr,
            self.broker_addr,
            *(f"{t}:{n}" for t, n in topics.items()),
        )

    def broker_offsets(self, topics: list[str]) -> list[BrokerOffsets]:
        """Ask the broker for min/max offsets of every queue of ``topics``."""
        out = self.workdir / "stats.tsv"
        self.run_tool("stats", self.namesrv_addr, self.broker_addr, str(out), *topics)
        rows = []
        for line in out.read_text(encoding="utf-8").splitlines():
            topic, qid, lo, hi, _updated = line.split("\t")
            rows.append(BrokerOffsets(topic, int(qid), int(lo), int(hi)))
        return sorted(rows, key=lambda r: (r.topic, r.queue_id))

    # -- diagnostics ----------------------------------------------------------------
    def _log_files(self) -> Iterator[Path]:
        yield self.log_dir / "namesrv.out"
        yield self.log_dir / "broker.out"
        rocketmq_logs = self.home / "logs" / "rocketmqlogs"
        for name in ("namesrv.log", "broker.log", "store.log", "broker_default.log"):
            yield rocketmq_logs / name

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of each JVM's output and main log files (for failure reports)."""
        parts = []
        for path in self._log_files():
            with contextlib.suppress(OSError):
                text = _without_logback_status(path.read_text(errors="replace").splitlines())
                parts.append(f"--- {path} (last {lines} lines)\n" + "\n".join(text[-lines:]))
        return "\n".join(parts)
