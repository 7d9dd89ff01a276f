"""compose/ and deploy/ checked without a Docker engine or a Kubernetes cluster.

The compose file against the compose specification's JSON schema (as vendored by
check-jsonschema), the Kubernetes manifests against the Kubernetes API's JSON schemas (bundled by
kubernetes-validate, strict: unknown fields fail), the systemd units with `systemd-analyze
verify` and `security`. The schemas cannot see what only Kairos knows, so the tests also check
that: every KAIROS_* variable is one `kairos --help` names, a ticker keeps its instance name and
its own state volume, and every grace period outlasts a clean handover.
"""

from __future__ import annotations

import importlib.resources
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import jsonschema
import kubernetes_validate
import typer
import yaml

from kairos.cli.app import app
from kairos.services.executor.settings import ExecutorSettings
from kairos.services.ticker.settings import TickerSettings

REPOSITORY = Path(__file__).resolve().parents[2]
COMPOSE = REPOSITORY / "compose" / "docker-compose.yml"
DOCKERFILE = REPOSITORY / "compose" / "Dockerfile"
KUBERNETES = REPOSITORY / "deploy" / "kubernetes"
SYSTEMD = REPOSITORY / "deploy" / "systemd"
# The oldest Kubernetes release the manifests claim (docs/deploy.md), and the newest bundled.
KUBERNETES_VERSIONS = ("1.27.0", kubernetes_validate.utils.latest_version())
# Variables in this namespace are librdkafka client properties and the properties file
# (KAIROS_KAFKA_SASL_MECHANISM, KAIROS_KAFKA_CONFIG), not options of one command.
KAFKA_PROPERTY_NAMESPACE = "KAIROS_KAFKA_"


def _ticker_handover_s() -> float:
    """How long a stopping ticker may take: its transaction watchdog's limit (Ticker.run)."""
    timeout_ms = TickerSettings.model_fields["transaction_timeout_ms"].default
    return 2 * timeout_ms / 1000 + 30


def _executor_shutdown_s() -> float:
    return float(ExecutorSettings.model_fields["shutdown_grace"].default.total_seconds())


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, f"write durations as <n>s or <n>m, not {duration!r}"
    return int(match[1]) * (60 if match[2] == "m" else 1)


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    """Every Kubernetes object with the file it is in (kustomization.yaml is not one)."""
    return [
        (path.name, document)
        for path in sorted(KUBERNETES.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for document in yaml.safe_load_all(path.read_text())
        if document
    ]


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for _, d in _manifests() if d["kind"] == kind}


def _cli_environment_variables() -> set[str]:
    """The variables `kairos … --help` names: options' env vars, and those their help mentions
    (variables read once for every command, outside the options' own env lookup)."""

    def walk(command: click.Command) -> Iterator[str]:
        for parameter in command.params:
            envvar = parameter.envvar
            yield from [envvar] if isinstance(envvar, str) else envvar or []
            yield from re.findall(
                r"KAIROS_[A-Z0-9_]*[A-Z0-9]", getattr(parameter, "help", None) or ""
            )
        for sub in getattr(command, "commands", {}).values():
            yield from walk(sub)

    return set(walk(typer.main.get_command(app)))


def _image_environment() -> dict[str, str]:
    return dict(re.findall(r"^ENV (\w+)=(\S+)$", DOCKERFILE.read_text(), flags=re.MULTILINE))


# -- compose --------------------------------------------------------------------------------------


def test_the_compose_file_follows_the_compose_specification() -> None:
    schema_file = (
        importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    )
    validator = jsonschema.Draft202012Validator(json.loads(schema_file.read_text()))
    problems = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(_compose())]
    assert not problems, "\n".join(problems)


def test_compose_references_resolve_and_the_kairos_image_is_built_once() -> None:
    compose = _compose()
    services = compose["services"]
    for name, service in services.items():
        for needed in service.get("depends_on", {}):
            assert needed in services, f"{name} depends on {needed}, which is no service"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in compose["volumes"], f"{name}: volume {source} is not declared"
    kairos = [name for name, s in services.items() if s.get("image") == "kairos:0.1.0"]
    builders = [name for name in kairos if "build" in services[name]]
    assert builders == ["topics"], "the first Kairos service to start builds the image, once"
    for name in kairos:
        if name != "topics":
            assert "topics" in services[name]["depends_on"], f"{name} starts before the topics"


def test_compose_kafka_nodes_form_one_replicated_quorum_that_kairos_reaches() -> None:
    services = _compose()["services"]
    nodes = {name: s["environment"] for name, s in services.items() if name.startswith("kafka-")}
    assert len(nodes) == 3
    voters = {f"{env['KAFKA_NODE_ID']}@{name}:9093" for name, env in nodes.items()}
    external_ports = set()
    for name, env in nodes.items():
        assert set(env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")) == voters
        assert f"INTERNAL://{name}:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 3
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 2
        external_ports.add(env["KAFKA_ADVERTISED_LISTENERS"].rsplit(":", 1)[1])
    assert len({env["CLUSTER_ID"] for env in nodes.values()}) == 1
    assert len(external_ports) == 3, "each node needs its own host port"
    bootstrap = services["ticker-a"]["environment"]["KAIROS_BOOTSTRAP_SERVERS"].split(",")
    assert sorted(bootstrap) == sorted(f"{name}:9092" for name in nodes)


def test_compose_tickers_keep_their_names_and_their_own_state_volume() -> None:
    services = _compose()["services"]
    state_dir = _image_environment()["KAIROS_STATE_DIR"]
    tickers = {n: s for n, s in services.items() if s.get("command") == ["ticker"]}
    assert len(tickers) == 2
    instances = {s["environment"]["KAIROS_TICKER_INSTANCE"] for s in tickers.values()}
    assert len(instances) == 2, "two tickers under one name fence each other"
    volumes = [v for s in tickers.values() for v in s["volumes"] if v.endswith(f":{state_dir}")]
    assert len(set(volumes)) == 2, "each ticker needs its own state volume at the state dir"
    for name, ticker in tickers.items():
        assert _seconds(ticker["stop_grace_period"]) >= _ticker_handover_s(), name
    executor = services["executor"]
    assert executor["environment"]["KAIROS_DEDUPE_URL"].startswith("postgresql://")
    assert _seconds(executor["stop_grace_period"]) > _executor_shutdown_s()


# -- Kubernetes -----------------------------------------------------------------------------------


def test_kubernetes_manifests_follow_the_kubernetes_api_schemas() -> None:
    problems = []
    for file_name, document in _manifests():
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(document, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                problems.append(f"{file_name} {document['kind']} on {version}: {error.message}")
    assert not problems, "\n".join(problems)


def test_the_kustomization_lists_every_manifest_but_the_example_secrets() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    examples = {name for name in files if name.endswith(".example.yaml")}
    # Applying the kustomization must never overwrite a real Secret with a placeholder.
    assert {d["kind"] for name, d in _manifests() if name in examples} == {"Secret"}
    assert sorted(kustomization["resources"]) == sorted(files - examples)


def _pod_templates() -> Iterator[tuple[str, dict[str, Any]]]:
    for _, document in _manifests():
        if document["kind"] in {"StatefulSet", "Deployment", "Job"}:
            yield document["metadata"]["name"], document["spec"]["template"]["spec"]


def test_kubernetes_references_resolve() -> None:
    config_maps, secrets = _by_kind("ConfigMap"), _by_kind("Secret")
    for name, pod in _pod_templates():
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] in secrets, f"{name}: {volume}"
        for container in pod["containers"]:
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in config_maps, name
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets, name
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            for probe in ("readinessProbe", "livenessProbe"):
                if probe in container:
                    port = ports[container[probe]["httpGet"]["port"]]
                    assert env["KAIROS_METRICS_PORT"] == str(port), f"{name} {probe}"
    services = _by_kind("Service")
    for name, stateful_set in _by_kind("StatefulSet").items():
        governing = services[stateful_set["spec"]["serviceName"]]
        assert governing["spec"]["clusterIP"] == "None", f"{name} needs a headless Service"


def test_kubernetes_pods_can_read_the_secret_and_write_their_state_as_a_non_root_user() -> None:
    for name, pod in _pod_templates():
        security = pod["securityContext"]
        assert security["runAsNonRoot"] and security["runAsUser"] != 0, name
        # Secret files belong to root and the fsGroup: the user reads them through the group.
        assert security["fsGroup"] == security["runAsGroup"], name
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                mode = volume["secret"]["defaultMode"]
                assert mode & 0o040 and not mode & 0o007, f"{name}: mode {mode:o}"


def test_the_ticker_statefulset_names_each_ticker_after_its_pod_with_its_own_volume() -> None:
    (ticker,) = _by_kind("StatefulSet").values()
    pod = ticker["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["ticker"]
    env = {e["name"]: e for e in container["env"]}
    assert env["KAIROS_TICKER_INSTANCE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    claims = {c["metadata"]["name"] for c in ticker["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[env["KAIROS_STATE_DIR"]["value"]] in claims, "the state dir must be a PVC"
    assert pod["terminationGracePeriodSeconds"] >= _ticker_handover_s()
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]

    (executor,) = _by_kind("Deployment").values()
    assert executor["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > (
        _executor_shutdown_s()
    )


# -- systemd --------------------------------------------------------------------------------------


def _unit_settings(path: Path) -> list[tuple[str, str]]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    return [
        (key, value)
        for key, _, value in (line.partition("=") for line in lines)
        if key and not key.startswith(("#", "["))
    ]


def test_systemd_units_verify_and_are_hardened(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: apt-get install systemd"
    kairos = str(Path(sys.executable).parent / "kairos")
    for unit in ("kairos-ticker@.service", "kairos-executor@.service"):
        # `verify` requires ExecStart's program to exist: point it at this venv's `kairos`.
        copy = tmp_path / unit
        copy.write_text((SYSTEMD / unit).read_text().replace("/opt/kairos/bin/kairos", kairos))
        instance = str(copy).replace("@.service", "@t1.service")
        verified = subprocess.run(
            [analyze, "verify", instance], capture_output=True, text=True, check=False
        )
        assert verified.returncode == 0 and not verified.stderr, verified.stderr
        security = subprocess.run(
            [analyze, "security", "--offline=yes", "--threshold=20", instance],
            capture_output=True,
            text=True,
            check=False,
        )
        assert security.returncode == 0, f"{unit} exposure above 2.0:\n{security.stdout}"
        settings = dict(_unit_settings(SYSTEMD / unit))
        assert settings["Restart"] == "always"
        limit = _ticker_handover_s() if "ticker" in unit else _executor_shutdown_s()
        assert _seconds(settings["TimeoutStopSec"]) >= limit, unit


# -- every file -----------------------------------------------------------------------------------


def _kairos_variables() -> Iterator[tuple[str, str]]:
    """(file, KAIROS_* name) for every variable the deploy files set."""
    pattern = re.compile(r"\b(KAIROS_[A-Z0-9_]+)\b")
    for path in [COMPOSE, DOCKERFILE, *KUBERNETES.glob("*.yaml"), *SYSTEMD.iterdir()]:
        for line in path.read_text().splitlines():
            if not line.lstrip().startswith("#"):
                for name in pattern.findall(line):
                    yield path.name, name


def test_every_kairos_variable_the_deploy_files_set_is_one_the_cli_documents() -> None:
    known = _cli_environment_variables()
    assert "KAIROS_TICKER_INSTANCE" in known, "the CLI's variables could not be collected"
    unknown = {
        f"{file_name}: {name}"
        for file_name, name in _kairos_variables()
        if name not in known and not name.startswith(KAFKA_PROPERTY_NAMESPACE)
    }
    assert not unknown, f"named by no `kairos --help`: {sorted(unknown)}"
