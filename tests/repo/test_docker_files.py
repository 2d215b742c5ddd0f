"""docker/: the image, compose and Kubernetes files parse and agree with the config.

No Docker engine here, so these are static checks: YAML is valid, every image is
pinned, every ``TIEREDSTORE_*`` variable is a real setting with a valid value, and the
paths the sidecar is configured with are the paths its volumes are mounted at (the
broker's store read-only, the state dir writable). The last tests break a copy of a
file and show the checks notice.
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.layout import PRODUCT_FOLDERS
from tieredstore.settings.loader import SETTINGS, Settings, load_settings, parse_duration

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
SETTING_ENVS = {s.env for s in SETTINGS}
#: Not a setting, but a variable the config loader reads (the config file's path).
CONFIG_ENV = "TIEREDSTORE_CONFIG"
#: What the operations listener (the one a container opens) serves: no message contents.
API_PATHS = {"/healthz", "/metrics", "/v1/queues"}
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
PLUGIN_CLASS = "io.tieredstore.broker.TieredReadPlugin"
PLUGIN_POM = REPO / "broker-plugin" / "pom.xml"


# -- helpers ---------------------------------------------------------------------------
def _load_yaml(name: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((DOCKER / name).read_text()) if d is not None]


def check_pinned(image: str) -> None:
    """An image reference must name an exact version (or digest), never a moving tag."""
    if "@sha256:" in image:
        return
    name, sep, tag = image.rpartition(":")
    assert sep and "/" not in tag, f"image {image!r} has no tag"
    assert tag not in {"latest", "stable", "edge", "main"}, f"image {image!r} is not pinned"
    assert re.search(r"\d+\.\d+|\d{4}-\d{2}-\d{2}", tag), f"image {image!r}: tag is no version"
    assert name


def check_envs(env: Mapping[str, object], where: str) -> dict[str, str]:
    """Every TIEREDSTORE_* name must be a setting (or the config file variable)."""
    ours = {k: str(v) for k, v in env.items() if k.startswith("TIEREDSTORE_")}
    unknown = sorted(set(ours) - SETTING_ENVS - {CONFIG_ENV})
    assert not unknown, f"{where}: {unknown} are not tieredstore settings"
    return ours


def settings_from_env(env: Mapping[str, str]) -> Settings:
    """Validate the variables exactly as the sidecar would (values included)."""
    return load_settings(env=dict(env))


def parse_broker_conf(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool


def compose_mounts(service: Mapping[str, Any]) -> list[Mount]:
    mounts = []
    for spec in service.get("volumes", []):
        parts = str(spec).split(":")
        mounts.append(Mount(parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")))
    return mounts


def mount_at(mounts: list[Mount], target: str) -> Mount:
    found = [m for m in mounts if m.target == target]
    assert found, f"nothing mounted at {target} (mounts: {mounts})"
    return found[0]


def check_reads_stay_local(settings: Settings, where: str) -> None:
    """The read API (message bodies, no auth) binds loopback and is not the metrics port."""
    assert settings.reads.bind in LOOPBACK, f"{where}: the read API binds beyond loopback"
    assert settings.reads.port != settings.http.port


def check_plugin_conf(conf: Mapping[str, str], settings: Settings, where: str) -> None:
    """The broker loads the read plugin and points it at the sidecar's read API."""
    assert conf.get("messageStorePlugIn") == PLUGIN_CLASS, f"{where}: no read plugin"
    host, _, port = conf["tieredstoreReadAddress"].rpartition(":")
    assert host in LOOPBACK, f"{where}: the plugin reads the sidecar beyond loopback"
    assert int(port) == settings.reads.port, f"{where}: the plugin's port is not reads.port"


def plugin_rocketmq_version() -> str:
    found = re.search(r"<rocketmq\.version>([^<]+)<", PLUGIN_POM.read_text())
    assert found, "broker-plugin/pom.xml pins no rocketmq.version"
    return found.group(1)


def _published_port(spec: object) -> int:
    """The container port of a compose ``ports`` entry ("[ip:]host:container[/proto]")."""
    return int(str(spec).split("/")[0].rsplit(":", 1)[-1])


# -- docker-compose.yml ---------------------------------------------------------------
def check_compose(doc: Mapping[str, Any]) -> None:
    services: Mapping[str, Any] = doc["services"]
    assert {"namesrv", "broker", "minio", "sidecar", "verifier"} <= set(services)
    for name, svc in services.items():
        check_pinned(svc["image"])
        check_envs(svc.get("environment", {}), f"compose service {name}")
    assert services["namesrv"]["image"] == f"apache/rocketmq:{plugin_rocketmq_version()}"
    assert services["broker"]["build"]["target"] == "broker", "the broker image has the plugin"

    sidecar = services["sidecar"]
    settings = settings_from_env(check_envs(sidecar["environment"], "sidecar"))
    mounts = compose_mounts(sidecar)
    store = mount_at(mounts, str(settings.store.path))
    assert store.read_only, "the sidecar must mount the broker's store read-only"
    state = mount_at(mounts, str(settings.state.dir))
    assert not state.read_only
    assert sidecar["build"]["target"] == "sidecar"
    assert settings.http.bind == "0.0.0.0", "in a container the API must leave loopback"
    # The sidecar shares the broker's network namespace (as in a pod): the plugin reaches
    # the read API on loopback, and the broker service publishes the namespace's ports.
    assert sidecar.get("network_mode") == "service:broker", "the sidecar must join the broker"
    assert "ports" not in sidecar, "network_mode service: ports are the broker service's"
    check_reads_stay_local(settings, "compose sidecar")
    published = {_published_port(p) for svc in services.values() for p in svc.get("ports", [])}
    assert settings.http.port in {_published_port(p) for p in services["broker"]["ports"]}
    assert settings.reads.port not in published, "the read API is published"
    grace = parse_duration(sidecar["stop_grace_period"])
    assert grace > settings.shutdown.deadline, "SIGKILL would cut the shutdown deadline"

    broker = services["broker"]
    conf_mount = next(m for m in compose_mounts(broker) if m.target.endswith("broker.conf"))
    conf = parse_broker_conf((DOCKER / conf_mount.source).read_text())
    assert f"{conf_mount.target}" in broker["command"], "the broker must load its broker.conf"
    assert (conf["brokerClusterName"], conf["brokerName"]) == (
        settings.cold.cluster,
        settings.cold.broker,
    )
    broker_store = mount_at(compose_mounts(broker), conf["storePathRootDir"])
    assert broker_store.source == store.source, "broker and sidecar must share the store volume"
    assert not broker_store.read_only
    assert conf.get("storeType", "default") == "default", "RocksDB consume queues are unsupported"
    check_plugin_conf(conf, settings, "compose broker.conf")

    verifier = services["verifier"]
    assert verifier["build"]["target"] == "verifier"
    script = shlex.split(" ".join(verifier["entrypoint"][2:]).replace(";", " ; "))
    flags = {script[i]: script[i + 1] for i, a in enumerate(script[:-1]) if a.startswith("--")}
    assert script[script.index("tieredstore") + 1] == "verify"
    assert flags["--store"] == str(settings.store.path)
    hot = mount_at(compose_mounts(verifier), flags["--store"])
    assert hot.source == store.source and hot.read_only
    assert flags["--cold"] == settings.cold.url
    assert (flags["--cluster"], flags["--broker"]) == (settings.cold.cluster, settings.cold.broker)
    assert flags["--endpoint-url"] == settings.cold.endpoint_url


def test_compose_file_is_consistent() -> None:
    (doc,) = _load_yaml("docker-compose.yml")
    check_compose(doc)


def test_compose_builds_targets_the_dockerfile_has() -> None:
    (doc,) = _load_yaml("docker-compose.yml")
    stages = dockerfile_stages()
    for svc in doc["services"].values():
        if "build" in svc:
            assert (REPO / "docker" / svc["build"]["context"]).resolve() == REPO
            assert (REPO / svc["build"]["dockerfile"]).is_file()
            assert svc["build"]["target"] in stages


# -- k8s-sidecar.yaml ------------------------------------------------------------------
def _k8s_env(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env", [])}


def check_k8s(docs: list[Any], tmp_path: Path) -> None:
    kinds = {d["kind"]: d for d in docs}
    config_map, sts = kinds["ConfigMap"], kinds["StatefulSet"]
    pod = sts["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod.get("initContainers", []) + pod["containers"]}
    sidecar, broker = containers["tieredstore"], containers["broker"]
    for c in containers.values():
        check_pinned(c["image"])
    assert sidecar.get("restartPolicy") == "Always", "a native sidecar keeps running"

    env = check_envs(_k8s_env(sidecar), "k8s tieredstore container")
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    config_path = env[CONFIG_ENV]
    config_mount = mounts[config_path]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[config_mount["name"]]["configMap"]["name"] == config_map["metadata"]["name"]
    toml = tmp_path / "sidecar.toml"
    toml.write_text(config_map["data"][config_mount["subPath"]])
    settings = load_settings(toml, env={k: v for k, v in env.items() if k != CONFIG_ENV})

    store = mounts[str(settings.store.path)]
    assert store.get("readOnly") is True
    assert not mounts[str(settings.state.dir)].get("readOnly", False)
    conf = parse_broker_conf(config_map["data"]["broker.conf"])
    assert (conf["brokerClusterName"], conf["brokerName"]) == (
        settings.cold.cluster,
        settings.cold.broker,
    )
    check_plugin_conf(conf, settings, "k8s broker.conf")
    broker_mounts = {m["mountPath"]: m for m in broker["volumeMounts"]}
    assert broker_mounts[conf["storePathRootDir"]]["name"] == store["name"]
    claims = {c["metadata"]["name"] for c in sts["spec"].get("volumeClaimTemplates", [])}
    assert store["name"] in claims | set(volumes)

    assert settings.http.bind == "0.0.0.0"
    check_reads_stay_local(settings, "k8s ConfigMap")
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    for c in containers.values():
        declared = {p["containerPort"] for p in c.get("ports", [])}
        assert settings.reads.port not in declared, f"{c['name']} declares the read API port"
    check_network_policy(docs, sts, settings)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in sidecar:
            get = sidecar[probe]["httpGet"]
            assert get["path"] in API_PATHS
            assert ports.get(get["port"], get["port"]) == settings.http.port
    assert pod["terminationGracePeriodSeconds"] > settings.shutdown.deadline
    assert sidecar["securityContext"]["runAsNonRoot"] is True
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == settings.http.port
    assert annotations["prometheus.io/path"] in API_PATHS


def check_network_policy(docs: list[Any], sts: Mapping[str, Any], settings: Settings) -> None:
    """A NetworkPolicy selects the broker pod and admits the metrics port, never the read
    API's; no Service routes to the read API."""
    labels = sts["spec"]["template"]["metadata"]["labels"]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert policies, "no NetworkPolicy keeps the pod's other ports closed"
    selecting = [
        p for p in policies
        if p["spec"]["podSelector"].get("matchLabels", {}).items() <= labels.items()
    ]  # fmt: skip
    assert selecting, "no NetworkPolicy selects the broker pod"
    for policy in selecting:
        assert "Ingress" in policy["spec"]["policyTypes"]
        for rule in policy["spec"].get("ingress", []):
            assert "ports" in rule, "an ingress rule without ports admits every port"
            ports = {p["port"] for p in rule["ports"]}
            assert settings.reads.port not in ports, "the policy admits the read API"
    admitted = {p["port"] for pol in selecting for r in pol["spec"]["ingress"] for p in r["ports"]}
    assert settings.http.port in admitted
    for svc in (d for d in docs if d["kind"] == "Service"):
        targets = {p.get("targetPort", p["port"]) for p in svc["spec"]["ports"]}
        assert settings.reads.port not in targets, "a Service routes to the read API"


def test_kubernetes_manifest_is_consistent(tmp_path: Path) -> None:
    check_k8s(_load_yaml("k8s-sidecar.yaml"), tmp_path)


# -- Dockerfile -----------------------------------------------------------------------
@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]]

    def last(self, op: str) -> str:
        found = [arg for o, arg in self.instructions if o == op]
        assert found, f"stage {self.name} has no {op}"
        return found[-1]

    def all(self, op: str) -> list[str]:
        return [arg for o, arg in self.instructions if o == op]


def dockerfile_stages(text: str | None = None) -> dict[str, Stage]:
    """Parse the Dockerfile into stages (in order), resolving ``ARG`` defaults in FROM."""
    text = (DOCKER / "Dockerfile").read_text() if text is None else text
    lines = re.sub(r"\\\n", " ", text).splitlines()
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "ARG" and current is None:
            key, _, value = rest.partition("=")
            args[key.strip()] = value.strip()
        elif op == "FROM":
            m = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", rest.strip(), re.IGNORECASE)
            assert m, f"every stage is named: {line}"
            base = re.sub(r"\$\{(\w+)\}", lambda a: args[a.group(1)], m.group(1))
            current = Stage(m.group(2), base, [])
            stages[current.name] = current
        else:
            assert current is not None, f"instruction before FROM: {line}"
            current.instructions.append((op, rest.strip()))
    return stages


def _stage_user(stages: dict[str, Stage], name: str) -> str:
    stage = stages[name]
    users = stage.all("USER")
    if users:
        return users[-1]
    return _stage_user(stages, stage.base)


def _stage_env(stages: dict[str, Stage], name: str) -> dict[str, str]:
    stage = stages[name]
    env = _stage_env(stages, stage.base) if stage.base in stages else {}
    for arg in stage.all("ENV"):
        for key, value in re.findall(r"(\w+)=(\S+)", arg):
            env[key] = value
    return env


def check_dockerfile(stages: dict[str, Stage]) -> None:
    assert list(stages)[-1] == "sidecar", "the sidecar is the default (last) target"
    for stage in stages.values():
        if stage.base not in stages:
            check_pinned(stage.base)
        for arg in stage.all("COPY"):
            if arg.startswith("--from"):
                continue
            *sources, _dest = arg.split()
            for src in sources:
                assert (REPO / src).exists(), f"COPY {src}: no such path in the repository"
    # The wheel is built from the core's folder, whose links name the layers' folders: a
    # folder not copied leaves a dangling link and a package missing from the image.
    copied = {src.rstrip("/") for arg in stages["build"].all("COPY") for src in arg.split()[:-1]}
    missing = [name for name in PRODUCT_FOLDERS if name not in copied]
    assert not missing, f"the build stage copies no {missing}"
    for final in ("sidecar", "verifier"):
        user = _stage_user(stages, final).split(":")[0]
        assert user not in {"0", "root"}, f"{final} runs as root"
    java = re.compile(r"openjdk|jre|jdk|java", re.IGNORECASE)
    for name in stages:
        if name == "verifier":
            continue
        for arg in stages[name].all("RUN"):
            assert not java.search(arg), f"stage {name} installs Java: {arg}"
    assert any(java.search(arg) for arg in stages["verifier"].all("RUN"))
    broker = stages["broker"]
    version = plugin_rocketmq_version()
    assert broker.base == f"apache/rocketmq:{version}", "broker image != the plugin's RocketMQ"
    copies = broker.all("COPY")
    assert any(c.startswith("--from=plugin-build") and "tieredstore-broker-plugin.jar" in c
               and c.endswith(f"/rocketmq-{version}/lib/") for c in copies), copies  # fmt: skip
    env = check_envs(_stage_env(stages, "sidecar"), "Dockerfile sidecar ENV")
    assert stages["sidecar"].last("EXPOSE") == env["TIEREDSTORE_HTTP_PORT"]
    # Not a whole config (no store or cold store): check the two values themselves.
    bind = env.get("TIEREDSTORE_READS_BIND", "127.0.0.1")
    assert bind in LOOPBACK, "Dockerfile sidecar ENV: the read API binds beyond loopback"
    assert env["TIEREDSTORE_READS_PORT"] != env["TIEREDSTORE_HTTP_PORT"]
    exposed = {p for arg in stages["sidecar"].all("EXPOSE") for p in arg.split()}
    assert env["TIEREDSTORE_READS_PORT"] not in exposed, "the image exposes the read API"
    assert env["TIEREDSTORE_STATE_DIR"] in stages["sidecar"].last("VOLUME")
    assert f":{env['TIEREDSTORE_HTTP_PORT']}/healthz" in stages["sidecar"].last("HEALTHCHECK")
    assert '"tieredstore"' in stages["sidecar"].last("ENTRYPOINT")


def test_dockerfile_is_consistent() -> None:
    check_dockerfile(dockerfile_stages())


def test_compose_and_image_agree_on_the_state_dir_and_port() -> None:
    (doc,) = _load_yaml("docker-compose.yml")
    env = _stage_env(dockerfile_stages(), "sidecar")
    sidecar_env = doc["services"]["sidecar"]["environment"]
    assert sidecar_env["TIEREDSTORE_STATE_DIR"] == env["TIEREDSTORE_STATE_DIR"]
    assert str(sidecar_env["TIEREDSTORE_HTTP_PORT"]) == env["TIEREDSTORE_HTTP_PORT"]


# -- the checks can fail -----------------------------------------------------------------
def _compose() -> dict[str, Any]:
    (doc,) = _load_yaml("docker-compose.yml")
    return copy.deepcopy(doc)


def test_a_misspelt_variable_is_caught() -> None:
    doc = _compose()
    env = doc["services"]["sidecar"]["environment"]
    env["TIEREDSTORE_COLD_URI"] = env.pop("TIEREDSTORE_COLD_URL")
    with pytest.raises(AssertionError, match="TIEREDSTORE_COLD_URI"):
        check_compose(doc)


def test_an_unpinned_image_is_caught() -> None:
    doc = _compose()
    doc["services"]["minio"]["image"] = "minio/minio:latest"
    with pytest.raises(AssertionError, match="not pinned"):
        check_compose(doc)


def test_a_writable_store_mount_is_caught() -> None:
    doc = _compose()
    vols = doc["services"]["sidecar"]["volumes"]
    doc["services"]["sidecar"]["volumes"] = [v.removesuffix(":ro") for v in vols]
    with pytest.raises(AssertionError, match="read-only"):
        check_compose(doc)


def test_a_store_path_that_is_not_mounted_is_caught() -> None:
    doc = _compose()
    doc["services"]["sidecar"]["environment"]["TIEREDSTORE_STORE_PATH"] = "/store"
    with pytest.raises(AssertionError, match="nothing mounted at /store"):
        check_compose(doc)


def test_java_in_the_sidecar_image_is_caught() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    text += "\nRUN apt-get install -y openjdk-17-jre-headless\n"
    with pytest.raises(AssertionError, match="stage sidecar installs Java"):
        check_dockerfile(dockerfile_stages(text))


def test_a_bad_value_in_the_kubernetes_config_is_caught(tmp_path: Path) -> None:
    from tieredstore.errors import ConfigError

    docs = _load_yaml("k8s-sidecar.yaml")
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    cm["data"]["sidecar.toml"] = cm["data"]["sidecar.toml"].replace("port = 9780", "port = 97800")
    with pytest.raises(ConfigError, match=r"bad value for http\.port"):
        check_k8s(docs, tmp_path)


def test_a_read_api_bound_beyond_loopback_is_caught() -> None:
    doc = _compose()
    doc["services"]["sidecar"]["environment"]["TIEREDSTORE_READS_BIND"] = "0.0.0.0"
    with pytest.raises(AssertionError, match="read API binds beyond loopback"):
        check_compose(doc)


def test_a_published_read_api_is_caught() -> None:
    doc = _compose()
    doc["services"]["broker"]["ports"].append("127.0.0.1:9781:9781")
    with pytest.raises(AssertionError, match="the read API is published"):
        check_compose(doc)


def test_a_read_api_port_in_kubernetes_is_caught(tmp_path: Path) -> None:
    docs = _load_yaml("k8s-sidecar.yaml")
    pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    pod["initContainers"][0]["ports"].append({"name": "reads", "containerPort": 9781})
    with pytest.raises(AssertionError, match="declares the read API port"):
        check_k8s(docs, tmp_path)


def test_a_network_policy_admitting_the_read_api_is_caught(tmp_path: Path) -> None:
    docs = _load_yaml("k8s-sidecar.yaml")
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    policy["spec"]["ingress"][0]["ports"].append({"protocol": "TCP", "port": 9781})
    with pytest.raises(AssertionError, match="the policy admits the read API"):
        check_k8s(docs, tmp_path)
    del policy["spec"]["ingress"][0]["ports"]
    with pytest.raises(AssertionError, match="admits every port"):
        check_k8s(docs, tmp_path)


def test_an_image_exposing_the_read_api_is_caught() -> None:
    text = (DOCKER / "Dockerfile").read_text().replace("EXPOSE 9780", "EXPOSE 9781\nEXPOSE 9780")
    with pytest.raises(AssertionError, match="exposes the read API"):
        check_dockerfile(dockerfile_stages(text))


def test_a_broker_without_the_plugin_is_caught(tmp_path: Path) -> None:
    docs = _load_yaml("k8s-sidecar.yaml")
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    cm["data"]["broker.conf"] = cm["data"]["broker.conf"].replace("9781", "9780")
    with pytest.raises(AssertionError, match=r"the plugin.s port is not reads\.port"):
        check_k8s(docs, tmp_path)
    cm["data"]["broker.conf"] = cm["data"]["broker.conf"].replace("messageStorePlugIn", "x")
    with pytest.raises(AssertionError, match="no read plugin"):
        check_k8s(docs, tmp_path)
