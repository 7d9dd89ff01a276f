"""compose/ and deploy/ checked without a Docker engine or a Kubernetes cluster.

The compose file against the compose specification's JSON schema (as vendored by
check-jsonschema), the Kubernetes manifests against the Kubernetes API's JSON schemas (bundled by
kubernetes-validate, strict: unknown fields fail), the systemd units with `systemd-analyze
verify` and `security`. The schemas cannot see what only Kairos knows, so the tests also check
that: every KAIROS_* variable is one `kairos --help` names, a ticker keeps its instance name and
its own state volume, every grace period outlasts a clean handover, each role connects as its
own principal and the administrator's steps grant that principal the role's ACLs, tickers run
with ownership `signed`, and the probes call `/readyz` and `/livez` where they can reach them
(the console's and the notifier's files, and the variables each process is given:
test_deploy_console_files.py).
(tests/cluster/test_deploy_roles.py runs the Kubernetes files' processes on a secured cluster.)
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
from kairos.services.notifier.settings import NotifierSettings
from kairos.services.ticker.settings import TickerSettings
from tests.deploy_files import (
    COMPOSE,
    DOCKERFILE,
    KUBERNETES,
    ROLE_OF_COMMAND,
    SYSTEMD,
    by_kind,
    client_properties,
    compose,
    compose_admin_steps,
    compose_principals,
    containers,
    grants,
    kubernetes_environment,
    manifests,
    mounted_properties,
    pod_templates,
    secret_names,
    systemd_credential,
    systemd_environment,
)

# The oldest Kubernetes release the manifests claim (docs/deploy.md), and the newest bundled.
KUBERNETES_VERSIONS = ("1.27.0", kubernetes_validate.utils.latest_version())
# Variables in this namespace are librdkafka client properties and the properties file
# (KAIROS_KAFKA_SASL_MECHANISM, KAIROS_KAFKA_CONFIG), not options of one command.
KAFKA_PROPERTY_NAMESPACE = "KAIROS_KAFKA_"
UNITS = ("kairos-ticker@.service", "kairos-executor@.service", "kairos-notifier@.service")


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


def _option_variables(command: str) -> dict[str, str]:
    """Each option's variable of `kairos COMMAND`, by option (the notifier's are its own)."""
    options = getattr(typer.main.get_command(app), "commands", {})[command].params
    return {str(option.name): str(option.envvar) for option in options}


def _probe_address(command: str, environment: dict[str, Any]) -> tuple[str, str]:
    """Where `kairos COMMAND`, given `environment`, serves /readyz and /livez."""
    if listen := environment.get("KAIROS_CONSOLE_LISTEN"):
        host, port = listen.rsplit(":", 1)
        return host, port
    variables = _option_variables(command)
    return environment[variables["metrics_host"]], str(environment[variables["metrics_port"]])


def _image_environment() -> dict[str, str]:
    return dict(re.findall(r"^ENV (\w+)=(\S+)$", DOCKERFILE.read_text(), flags=re.MULTILINE))


# -- compose --------------------------------------------------------------------------------------


def test_the_compose_file_follows_the_compose_specification() -> None:
    schema_file = (
        importlib.resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json"
    )
    validator = jsonschema.Draft202012Validator(json.loads(schema_file.read_text()))
    problems = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(compose())]
    assert not problems, "\n".join(problems)


def test_compose_references_resolve_and_the_kairos_image_is_built_once() -> None:
    declared = compose()
    services = declared["services"]
    for name, service in services.items():
        for needed in service.get("depends_on", {}):
            assert needed in services, f"{name} depends on {needed}, which is no service"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared["volumes"], f"{name}: volume {source} is not declared"
    kairos = [name for name, s in services.items() if s.get("image") == "kairos:0.1.0"]
    builders = [name for name in kairos if "build" in services[name]]
    assert builders == ["admin"], "the first Kairos service to start builds the image, once"
    for name in kairos:
        if name != "admin":
            assert "admin" in services[name]["depends_on"], f"{name} starts before the topics"


def test_compose_kafka_nodes_form_one_replicated_quorum_that_kairos_reaches() -> None:
    services = compose()["services"]
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
    for name, env in nodes.items():
        protocols = dict(
            pair.split(":") for pair in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
        )
        assert set(protocols.values()) == {"SASL_PLAINTEXT"}, (
            f"{name}: a listener without principals"
        )
        assert env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false", name
    bootstrap = services["ticker-a"]["environment"]["KAIROS_BOOTSTRAP_SERVERS"].split(",")
    assert sorted(bootstrap) == sorted(f"{name}:9092" for name in nodes)


def test_compose_tickers_keep_their_names_and_their_own_state_volume() -> None:
    services = compose()["services"]
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


def test_compose_roles_connect_as_their_own_principals_granted_by_the_administrator() -> None:
    services = compose()["services"]
    principals = compose_principals()
    admin = services["admin"]["environment"]["KAIROS_KAFKA_SASL_USERNAME"]
    granted = grants(compose_admin_steps())
    users = {user for _, user in principals.values()}
    assert len(users) == len({role for role, _ in principals.values()}), "one principal per role"
    assert admin not in users
    for name, (role, user) in principals.items():
        assert (role, user) in granted, f"{name}: the admin never grants {user} the {role} ACLs"
    console = services["console"]["environment"]
    assert "KAIROS_CONSOLE_USERS_FILE" in console and "KAIROS_TEAM_KEYS" in console
    assert ("producer", console["KAIROS_KAFKA_SASL_USERNAME"]) in granted, "its actions write"
    # Each principal's password is the one the brokers hold for it, from compose/.env.
    node = services["kafka-1"]["environment"]
    jaas = node["KAFKA_LISTENER_NAME_INTERNAL_PLAIN_SASL_JAAS_CONFIG"]
    passwords = dict(re.findall(r'user_(\S+)="([^"]+)"', jaas))
    assert f"User:{admin}" in node["KAFKA_SUPER_USERS"].split(";")
    for name in [*principals, "admin"]:
        environment = services[name]["environment"]
        user = environment["KAIROS_KAFKA_SASL_USERNAME"]
        assert passwords[user] == environment["KAIROS_KAFKA_SASL_PASSWORD"], name


def test_compose_tickers_are_signed_and_the_demo_team_signs_with_its_registered_key() -> None:
    services = compose()["services"]
    for name, (role, _) in compose_principals().items():
        if role == "ticker":
            assert services[name]["environment"]["KAIROS_OWNERSHIP"] == "signed", name
    steps = [" ".join(step) for step in compose_admin_steps()]
    demo = services["schedules"]["environment"]
    team = Path(demo["KAIROS_SIGNING_KEY"]).stem
    assert any(step.startswith(f"teams put {team} --public-key") for step in steps), team


def test_compose_health_checks_ask_each_service_whether_it_is_ready() -> None:
    services = compose()["services"]
    checked = set()
    for name, (role, _) in compose_principals().items():
        if role == "producer":
            continue
        command = services[name]["command"][0]
        host, port = _probe_address(command, services[name]["environment"])
        assert f"'http://127.0.0.1:{port}/readyz'" in " ".join(
            services[name]["healthcheck"]["test"]
        )
        checked.add(command)
        # A host port mapping reaches the container's interface, never its loopback.
        assert host == "0.0.0.0", (
            f"{name}: the mapped port {services[name]['ports']} reaches nothing"
        )
    assert checked == {"ticker", "executor", "console", "notifier"}


# -- Kubernetes -----------------------------------------------------------------------------------


def test_kubernetes_manifests_follow_the_kubernetes_api_schemas() -> None:
    problems = []
    for file_name, document in manifests():
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
    assert {d["kind"] for name, d in manifests() if name in examples} == {"Secret"}
    assert sorted(kustomization["resources"]) == sorted(files - examples)


def test_kubernetes_references_resolve() -> None:
    config_maps, secrets = by_kind("ConfigMap"), by_kind("Secret")
    for name, pod in pod_templates().items():
        for volume in pod.get("volumes", []):
            for secret in secret_names(volume):
                assert secret in secrets, f"{name}: {volume}"
        claims = (
            by_kind("StatefulSet").get(name, {}).get("spec", {}).get("volumeClaimTemplates", [])
        )
        volumes = {v["name"] for v in pod.get("volumes", [])} | {
            c["metadata"]["name"] for c in claims
        }
        for container in containers(pod):
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in config_maps, name
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in secrets, name
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{name}: {mount}"
    services = by_kind("Service")
    for name, stateful_set in by_kind("StatefulSet").items():
        governing = services[stateful_set["spec"]["serviceName"]]
        assert governing["spec"]["clusterIP"] == "None", f"{name} needs a headless Service"


def test_kubernetes_probes_ask_for_readiness_and_liveness_where_the_kubelet_reaches() -> None:
    probed = set()
    for name, pod in pod_templates().items():
        for container in pod["containers"]:
            if "readinessProbe" not in container:
                continue
            probed.add(container["args"][0])
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            host, port = _probe_address(container["args"][0], kubernetes_environment(container))
            # The kubelet probes the pod's IP: the default 127.0.0.1 would fail every probe.
            assert host == "0.0.0.0", name
            for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
                assert container[probe]["httpGet"]["path"] == path, f"{name} {probe}"
                assert str(ports[container[probe]["httpGet"]["port"]]) == port, f"{name} {probe}"
    assert probed == {"ticker", "executor", "console", "notifier"}


def test_kubernetes_pods_can_read_the_secret_and_write_their_state_as_a_non_root_user() -> None:
    for name, pod in pod_templates().items():
        security = pod["securityContext"]
        assert security["runAsNonRoot"] and security["runAsUser"] != 0, name
        # Secret files belong to root and the fsGroup: the user reads them through the group.
        assert security["fsGroup"] == security["runAsGroup"], name
        for volume in pod.get("volumes", []):
            if secret_names(volume):
                mode = (volume.get("secret") or volume["projected"])["defaultMode"]
                assert mode & 0o040 and not mode & 0o007, f"{name}: mode {mode:o}"


def _kubernetes_principals() -> dict[str, str]:
    """The SASL user each workload's role connects as, by role."""
    (job,) = by_kind("Job")
    return {
        ROLE_OF_COMMAND[pod["containers"][0]["args"][0]]: mounted_properties(
            pod, pod["containers"][0]
        )["sasl.username"]
        for name, pod in pod_templates().items()
        if name != job
    }


def test_kubernetes_roles_connect_as_their_own_principals_granted_by_the_topics_job() -> None:
    (job_name,) = by_kind("Job")
    job = pod_templates()[job_name]
    granted = grants(c["args"] for c in containers(job))
    admins = {mounted_properties(job, c)["sasl.username"] for c in containers(job)}
    assert len(admins) == 1, "every step of the Job runs as the administrator"
    principals = _kubernetes_principals()
    for role, principal in principals.items():
        assert (role, principal) in granted, f"the {role}'s {principal} is not granted"
    assert len(set(principals.values())) == len(principals), "one principal per role"
    assert not admins & set(principals.values())
    assert ("producer", principals["console"]) in granted, "the console's actions write"
    teams = (
        {
            client_properties(s["stringData"]["client.properties"])["sasl.username"]
            for s in by_kind("Secret").values()
            if "client.properties" in s.get("stringData", {})
        }
        - admins
        - set(principals.values())
    )
    assert teams and all(("producer", team) in granted for team in teams), teams


def test_the_ticker_statefulset_names_each_ticker_after_its_pod_with_its_own_volume() -> None:
    (ticker,) = by_kind("StatefulSet").values()
    pod = ticker["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["ticker"]
    env = {e["name"]: e for e in container["env"]}
    assert env["KAIROS_TICKER_INSTANCE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    claims = {c["metadata"]["name"] for c in ticker["spec"]["volumeClaimTemplates"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[env["KAIROS_STATE_DIR"]["value"]] in claims, "the state dir must be a PVC"
    assert env["KAIROS_OWNERSHIP"]["value"] == "signed"
    assert pod["terminationGracePeriodSeconds"] >= _ticker_handover_s()
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]

    executor = by_kind("Deployment")["kairos-executor"]
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
    limits = {
        "ticker": _ticker_handover_s(),
        "executor": _executor_shutdown_s(),
        "notifier": NotifierSettings.model_fields["timeout"].default.total_seconds(),
    }
    for unit in UNITS:
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
        limit = limits[settings["ExecStart"].split()[-1]]
        assert _seconds(settings["TimeoutStopSec"]) >= limit, unit


def test_systemd_units_connect_as_their_roles_principals_and_tickers_are_signed(
    tmp_path: Path,
) -> None:
    kubernetes = _kubernetes_principals()
    for unit in UNITS:
        role = dict(_unit_settings(SYSTEMD / unit))["ExecStart"].split()[-1]
        properties = client_properties(systemd_credential(unit).read_text())
        # One name per role in every form: the ACLs granted to it are the same.
        assert properties["sasl.username"] == kubernetes[role], unit
        environment = systemd_environment(unit, "t1", tmp_path, tmp_path)
        assert environment.get("KAIROS_OWNERSHIP") == ("signed" if role == "ticker" else None)
        # Metrics and probes stay on 127.0.0.1, the default: no systemd file moves them.
        assert _option_variables(role)["metrics_host"] not in environment, unit
    for name, (role, principal) in compose_principals().items():
        if role in kubernetes:
            assert principal == kubernetes[role], name


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
    # The image's build arguments are the build's, not the process's.
    build_arguments = re.findall(r"^ARG (\w+)", DOCKERFILE.read_text(), flags=re.MULTILINE)
    unknown = {
        f"{file_name}: {name}"
        for file_name, name in _kairos_variables()
        if name not in known
        and not name.startswith(KAFKA_PROPERTY_NAMESPACE)
        and not (file_name == DOCKERFILE.name and name in build_arguments)
    }
    assert not unknown, f"named by no `kairos --help`: {sorted(unknown)}"
