"""The deploy files read as their platforms read them: one reader for the offline checks
(tests/local/test_deploy_files.py), the broker tests of their environments and the cluster test
of their principals (tests/cluster/test_deploy_roles.py)."""

from __future__ import annotations

import copy
import functools
import re
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

REPOSITORY = Path(__file__).resolve().parents[1]
COMPOSE = REPOSITORY / "compose" / "docker-compose.yml"
DOCKERFILE = REPOSITORY / "compose" / "Dockerfile"
KUBERNETES = REPOSITORY / "deploy" / "kubernetes"
SYSTEMD = REPOSITORY / "deploy" / "systemd"

# The role of a Kairos process is its command; `apply` is a producer team's.
ROLE_OF_COMMAND = {
    "ticker": "ticker",
    "executor": "executor",
    "console": "console",
    "notifier": "notifier",
    "apply": "producer",
}
_GRANT = re.compile(r"^acls (\w+) --principal User:(\S+) --apply$")


@functools.cache
def _parsed(path: Path) -> list[Any]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = copy.deepcopy(_parsed(COMPOSE)[0])
    return loaded


def compose_principals() -> dict[str, tuple[str, str]]:
    """Each Kairos service's (role, SASL user): the services running `kairos <command>`."""
    return {
        name: (ROLE_OF_COMMAND[s["command"][0]], s["environment"]["KAIROS_KAFKA_SASL_USERNAME"])
        for name, s in compose()["services"].items()
        if s.get("command", [""])[0] in ROLE_OF_COMMAND
    }


def compose_admin_steps() -> list[list[str]]:
    """The `kairos` commands of the compose `admin` service's script, without `kairos`."""
    (script,) = compose()["services"]["admin"]["command"]
    return [line.split()[1:] for line in script.splitlines() if line.startswith("kairos ")]


def grants(commands: Iterable[list[str]]) -> set[tuple[str, str]]:
    """(role, principal) of every `kairos acls ROLE --principal User:NAME --apply` step."""
    return {
        (match[1], match[2]) for command in commands if (match := _GRANT.match(" ".join(command)))
    }


def manifests() -> list[tuple[str, dict[str, Any]]]:
    """Every Kubernetes object with the file it is in (kustomization.yaml is not one)."""
    return [
        (path.name, copy.deepcopy(document))
        for path in sorted(KUBERNETES.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for document in _parsed(path)
    ]


def by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in manifests() if d["kind"] == kind}


def pod_templates() -> dict[str, dict[str, Any]]:
    """The pod spec of every workload, by the workload's name."""
    return {
        document["metadata"]["name"]: document["spec"]["template"]["spec"]
        for _, document in manifests()
        if document["kind"] in {"StatefulSet", "Deployment", "Job"}
    }


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The init containers, in their order, then the containers."""
    return [*pod.get("initContainers", []), *pod["containers"]]


def secret_names(volume: dict[str, Any]) -> list[str]:
    """The Secrets a volume shows: a `secret` volume's, or a `projected` one's sources'."""
    if "secret" in volume:
        return [volume["secret"]["secretName"]]
    return [s["secret"]["name"] for s in volume.get("projected", {}).get("sources", [])]


def kubernetes_environment(container: dict[str, Any], pod_name: str = "") -> dict[str, str]:
    """The container's environment as the kubelet resolves it: its ConfigMaps and Secrets (the
    examples'), then its own variables (`metadata.name` is `pod_name`)."""
    config_maps, secrets = by_kind("ConfigMap"), by_kind("Secret")
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            environment.update(config_maps[source["configMapRef"]["name"]]["data"])
        if "secretRef" in source:
            environment.update(secrets[source["secretRef"]["name"]]["stringData"])
    for variable in container.get("env", []):
        if "value" in variable:
            environment[variable["name"]] = variable["value"]
        else:
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            environment[variable["name"]] = pod_name
    return environment


def run_init_containers(
    pod: dict[str, Any], root: Path, placeholder: Callable[[Path], None] | None = None
) -> dict[str, Path]:
    """Run the pod's init containers here, as the kubelet would, each volume they mount a
    directory under `root` (by the volume's name): a Secret volume's holds the example Secrets'
    files at the volume's defaultMode, an empty one (a placeholder) made by `placeholder(path)`
    if given. Each mount path in their commands stands for its directory. The directories, by
    volume name."""
    init = pod.get("initContainers", [])
    mounted = {m["name"] for container in init for m in container["volumeMounts"]}
    secrets = by_kind("Secret")
    directories = {}
    for volume in (v for v in pod.get("volumes", []) if v["name"] in mounted):
        directory = root / volume["name"]
        directory.mkdir(parents=True)
        for name in secret_names(volume):
            for file_name, text in secrets[name]["stringData"].items():
                path = directory / file_name
                if text or placeholder is None:
                    path.write_text(text)
                else:
                    placeholder(path)
                path.chmod((volume.get("secret") or volume["projected"])["defaultMode"])
        directories[volume["name"]] = directory
    for container in init:
        # A tool of the image run in place of `kairos`, the image's entrypoint.
        command = [*container["command"], *container.get("args", [])]
        for mount in sorted(container["volumeMounts"], key=lambda m: -len(m["mountPath"])):
            local = str(directories[mount["name"]])
            command = [part.replace(mount["mountPath"], local) for part in command]
        ran = subprocess.run(command, capture_output=True, text=True, check=False)
        assert ran.returncode == 0, f"init container {container['name']}: {ran.stderr}"
    return directories


def local_path(container: dict[str, Any], directories: dict[str, Path], path: str) -> Path:
    """Where the container's `path` is here, its volumes being `directories`
    (`run_init_containers`)."""
    for mount in sorted(container["volumeMounts"], key=lambda m: -len(m["mountPath"])):
        if Path(path).is_relative_to(mount["mountPath"]):
            return directories[mount["name"]] / Path(path).relative_to(mount["mountPath"])
    raise AssertionError(f"{container['name']}: {path} is on no volume")


def client_properties(text: str) -> dict[str, str]:
    """A librdkafka properties file's settings (key=value lines, `#` comments)."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def mounted_properties(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The client properties the container's KAIROS_KAFKA_CONFIG names, from the Secret the
    pod mounts there."""
    config = Path(kubernetes_environment(container)["KAIROS_KAFKA_CONFIG"])
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    (volume,) = [v for v in pod["volumes"] if v["name"] == mounts[str(config.parent)]]
    secrets = by_kind("Secret")
    (text,) = [
        secrets[name]["stringData"][config.name]
        for name in secret_names(volume)
        if config.name in secrets[name]["stringData"]
    ]
    return client_properties(text)


def systemd_environment(
    unit: str, instance: str, state_root: Path, credentials: Path
) -> dict[str, str]:
    """The unit's environment as systemd builds it: `Environment=` lines (specifiers `%i`, `%S`,
    `%d` replaced), then the shipped kairos.env, whose settings win."""
    specifiers = {"%i": instance, "%S": str(state_root), "%d": str(credentials)}
    environment = {}
    for line in (SYSTEMD / unit).read_text().splitlines():
        if line.startswith("Environment="):
            name, value = line.removeprefix("Environment=").split("=", 1)
            environment[name] = re.sub(r"%[iSd]", lambda m: specifiers[m[0]], value)
    environment.update(client_properties((SYSTEMD / "kairos.env").read_text()))
    return environment


def systemd_credential(unit: str) -> Path:
    """The deploy/systemd file the unit loads as its `kafka.properties` credential."""
    loaded = re.search(
        r"^LoadCredential=kafka\.properties:/etc/kairos/(\S+)$",
        (SYSTEMD / unit).read_text(),
        flags=re.MULTILINE,
    )
    assert loaded, f"{unit} loads no kafka.properties credential from /etc/kairos"
    return SYSTEMD / str(loaded[1])
