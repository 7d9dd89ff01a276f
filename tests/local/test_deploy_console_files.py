"""The console and the notifier in the shipped deploy files, checked without a Docker engine or a
cluster: the console acts as its users' teams with keys of those teams (never one signing key),
from files only it may read, answering the host names it is reached by (docs/console.md,
docs/deploy.md); the notifier reads its routes and their webhook secrets from files only it may
read, under its pod's or unit's name (docs/notifications.md). And every Kairos process of the
files is given only variables its own command reads."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import typer
import yaml

from kairos.cli.app import app
from kairos.services.console.identity import Users
from kairos.services.console.settings import host_list
from kairos.services.notifier.routes import load_routes
from kairos.services.notifier.settings import NotifierSettings
from kairos.streams.wire.signing import load_signer, new_signing_key
from tests.deploy_files import (
    SYSTEMD,
    by_kind,
    compose,
    compose_admin_steps,
    containers,
    kubernetes_environment,
    local_path,
    pod_templates,
    run_init_containers,
    secret_names,
    systemd_environment,
)

# The oldest Kubernetes release the manifests claim (docs/deploy.md), and the newest bundled.
KUBERNETES_VERSIONS = ("1.27.0", kubernetes_validate.utils.latest_version())
# Variables in this namespace are librdkafka client properties and the properties file
# (KAIROS_KAFKA_SASL_MECHANISM, KAIROS_KAFKA_CONFIG), not options of one command.
KAFKA_PROPERTY_NAMESPACE = "KAIROS_KAFKA_"


# Files (and directories of files) Kairos refuses when its group may read them: a Secret's
# files always are.
_PRIVATE_FILES = (
    "KAIROS_SIGNING_KEY",
    "KAIROS_CONSOLE_USERS_FILE",
    "KAIROS_TEAM_KEYS",
    "KAIROS_SESSION_SECRET_FILE",
    "KAIROS_NOTIFIER_ROUTES_FILE",
)
# One try of a delivery: what a stopping notifier may wait for.
DELIVERY_S = NotifierSettings.model_fields["timeout"].default.total_seconds()


def _run_the_compose_admin_script(volume: Path) -> None:
    """The admin service's script on this machine, in `volume` for its state dir: `kairos teams
    keygen` is this venv's, every other `kairos` step (they need the brokers) does nothing."""
    admin = compose()["services"]["admin"]
    (mount,) = [v.split(":")[1] for v in admin["volumes"] if v.startswith("secrets:")]
    (script,) = admin["command"]
    # Compose's interpolation: `$$` is a literal `$`.
    script = script.replace("$$", "$").replace(f"cd {mount}\n", f"cd {volume}\n")
    stub = volume.parent / "bin" / "kairos"
    stub.parent.mkdir(exist_ok=True)
    real = Path(sys.executable).parent / "kairos"
    stub.write_text(f'#!/bin/sh\n[ "$1 $2" != "teams keygen" ] || exec {real} "$@"\n')
    stub.chmod(0o755)
    path = f"{stub.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    ran = subprocess.run(
        [*admin["entrypoint"], script],
        env={**os.environ, "PATH": path},
        capture_output=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr.decode()


def test_compose_console_acts_as_its_users_teams_with_keys_the_admin_registered(
    tmp_path: Path,
) -> None:
    services = compose()["services"]
    console = services["console"]
    environment = console["environment"]
    # `kairos console` refuses one signing key for every action: it signs as the acting team.
    assert "KAIROS_SIGNING_KEY" not in environment
    (secrets,) = [v.split(":")[1] for v in console["volumes"] if v.startswith("secrets:")]
    volume = tmp_path / "secrets"
    volume.mkdir()
    _run_the_compose_admin_script(volume)

    def here(variable: str) -> Path:
        return volume / Path(environment[variable]).relative_to(secrets)

    users = Users.load(here("KAIROS_CONSOLE_USERS_FILE"))
    steps = [" ".join(step) for step in compose_admin_steps()]
    admins = {
        step.split()[2] for step in steps if step.startswith("teams put ") and "--admin" in step
    }
    assert users.entries and all(e.teams & admins for e in users.entries.values()), (
        "the demo user must act on every schedule, as an administrators' team"
    )
    keys = here("KAIROS_TEAM_KEYS")
    for team in {team for entry in users.entries.values() for team in entry.teams}:
        signer = load_signer(keys / f"{team}.key")
        assert signer.team == team
        registered = (volume / f"{team}.keygen").read_text()
        public = base64.b64encode(signer.public_key()).decode()
        assert f"public key: {public}" in registered, f"{team}.key is not the key registered"

    # Again on the same volume, with a users file of before teams per user: nothing is made
    # anew, and the demo user keeps their token and acts as ops.
    file = here("KAIROS_CONSOLE_USERS_FILE")
    (name, entry), *_ = users.entries.items()
    file.write_text(f"{name}:{entry.token}\n")
    _run_the_compose_admin_script(volume)
    assert Users.load(file).entries == users.entries

    # Its name on the compose network is answered, besides localhost.
    assert "console" in host_list(environment["KAIROS_ALLOWED_HOSTS"])


def _placeholder_key(path: Path) -> None:
    """What an operator puts in the example Secret's empty `<team>.key`."""
    path.write_text(new_signing_key(path.stem)[0])


def test_kubernetes_keys_and_users_reach_kairos_as_private_copies(tmp_path: Path) -> None:
    checked = set()
    for name, pod in pod_templates().items():
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            env = kubernetes_environment(container)
            private = [v for v in _PRIVATE_FILES if v in env]
            if not private:
                continue
            # The init containers, run here: what they leave is what the container reads.
            directories = run_init_containers(pod, tmp_path / name, _placeholder_key)
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            for variable in private:
                (volume,) = [
                    v for path, v in mounts.items() if Path(env[variable]).is_relative_to(path)
                ]
                assert not secret_names(volumes[volume]), f"{name}: {variable} is group-readable"
                copy = local_path(container, directories, env[variable])
                files = sorted(copy.iterdir()) if copy.is_dir() else [copy]
                assert files, f"{name}: {variable} {env[variable]} is empty"
                for file in files:
                    assert file.stat().st_mode & 0o777 == 0o600, f"{name}: {file.name}"
                checked.add(variable)
    assert {"KAIROS_CONSOLE_USERS_FILE", "KAIROS_TEAM_KEYS", "KAIROS_NOTIFIER_ROUTES_FILE"} <= (
        checked
    )


def test_the_kubernetes_console_acts_as_its_users_teams_with_their_keys(tmp_path: Path) -> None:
    pod = pod_templates()["kairos-console"]
    (container,) = pod["containers"]
    env = kubernetes_environment(container)
    # `kairos console` refuses one signing key for every action: it signs as the acting team.
    assert "KAIROS_SIGNING_KEY" not in env
    directories = run_init_containers(pod, tmp_path, _placeholder_key)
    users = Users.load(local_path(container, directories, env["KAIROS_CONSOLE_USERS_FILE"]))
    keys = local_path(container, directories, env["KAIROS_TEAM_KEYS"])
    teams = {team for entry in users.entries.values() for team in entry.teams}
    assert teams and all(entry.teams for entry in users.entries.values())
    for team in teams:
        assert load_signer(keys / f"{team}.key").team == team, f"no key of team {team}"
    # The Service's name is answered (the operator adds the Ingress's host).
    labels = by_kind("Deployment")["kairos-console"]["spec"]["selector"]["matchLabels"]
    (service,) = [n for n, s in by_kind("Service").items() if s["spec"]["selector"] == labels]
    assert service in host_list(env["KAIROS_ALLOWED_HOSTS"])


# -- the notifier ---------------------------------------------------------------------------------


def _routes(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (route for routes in document["teams"].values() for route in routes)


def test_the_kubernetes_notifier_reads_its_routes_and_their_secrets_as_private_copies(
    tmp_path: Path,
) -> None:
    pod = pod_templates()["kairos-notifier"]
    (container,) = pod["containers"]
    env = kubernetes_environment(container)
    directories = run_init_containers(pod, tmp_path)
    secret_volumes = {v["name"] for v in pod["volumes"] if secret_names(v)}
    from_secrets = [path for name, path in directories.items() if name in secret_volumes]
    routes_file = local_path(container, directories, env["KAIROS_NOTIFIER_ROUTES_FILE"])
    document = yaml.safe_load(routes_file.read_text())
    signed = [route for route in _routes(document) if "secret_file" in route]
    assert signed, "the example shows a webhook's secret"
    for route in signed:
        # Where the init container copied it, as the notifier's container sees it.
        copy = local_path(container, directories, route["secret_file"])
        assert not any(copy.is_relative_to(secret) for secret in from_secrets), route["name"]
        assert copy.stat().st_mode & 0o777 == 0o600, route["name"]
        route["secret_file"] = str(copy)
    routes_file.write_text(yaml.safe_dump(document))
    routes = load_routes(routes_file)
    assert not routes.problems and all(routes.by_team.values()), routes.problems


def test_the_compose_notifier_reads_the_routes_file_the_admin_made(tmp_path: Path) -> None:
    notifier = compose()["services"]["notifier"]
    (secrets,) = [v.split(":")[1] for v in notifier["volumes"] if v.startswith("secrets:")]
    volume = tmp_path / "secrets"
    volume.mkdir()
    _run_the_compose_admin_script(volume)
    routes_file = notifier["environment"]["KAIROS_NOTIFIER_ROUTES_FILE"]
    # Mode 0600, or the notifier refuses it and never starts.
    assert load_routes(volume / Path(routes_file).relative_to(secrets)).by_team == {}


def test_notifiers_are_named_after_their_pod_or_unit_and_outlast_a_delivery(
    tmp_path: Path,
) -> None:
    pod = by_kind("Deployment")["kairos-notifier"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (instance,) = [e for e in container["env"] if e["name"] == "KAIROS_NOTIFIER_INSTANCE"]
    assert instance["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert pod["terminationGracePeriodSeconds"] > DELIVERY_S
    service = compose()["services"]["notifier"]
    assert service["environment"]["KAIROS_NOTIFIER_INSTANCE"]
    assert int(service["stop_grace_period"].removesuffix("s")) > DELIVERY_S
    # (The unit's TimeoutStopSec: test_deploy_files.py.)
    unit = systemd_environment("kairos-notifier@.service", "n1", tmp_path, tmp_path)
    assert unit["KAIROS_NOTIFIER_INSTANCE"] == "n1"


# -- every process --------------------------------------------------------------------------------


def _own_variables(command: Any) -> Iterator[str]:
    """The variables a (click) command's options read, and those their help mentions (read once
    for every command, outside the options' own env lookup)."""
    for parameter in command.params:
        envvar = parameter.envvar
        yield from [envvar] if isinstance(envvar, str) else envvar or []
        yield from re.findall(r"KAIROS_[A-Z0-9_]*[A-Z0-9]", getattr(parameter, "help", None) or "")


def _command_variables(args: list[str]) -> set[str]:
    """The variables `kairos ARGS` reads: the root's, and each (sub)command's on the way."""
    command: Any = typer.main.get_command(app)
    known = set(_own_variables(command))
    for arg in args:
        command = getattr(command, "commands", {}).get(arg)
        if command is None:  # an argument, not a subcommand
            return known
        known |= set(_own_variables(command))
    return known


def _deployed_processes() -> Iterator[tuple[str, list[str], set[str]]]:
    """(where, `kairos` arguments, variables set for it alone) of each process the files start."""
    for name, pod in pod_templates().items():
        for container in containers(pod):
            if "command" not in container:  # the image's entrypoint, `kairos`
                own = {variable["name"] for variable in container.get("env", [])}
                yield f"{name}/{container['name']}", container["args"], own
    for name, service in compose()["services"].items():
        if str(service.get("image")).startswith("kairos:") and "entrypoint" not in service:
            yield name, service["command"], set(service["environment"])
    for unit in sorted(SYSTEMD.glob("kairos-*@.service")):
        (start,) = re.findall(r"^ExecStart=\S+ (.*)$", unit.read_text(), re.MULTILINE)
        variables = systemd_environment(unit.name, "t1", Path("/"), Path("/"))
        yield unit.name, start.split(), set(variables)


def test_each_process_is_given_only_variables_its_own_command_reads() -> None:
    # Another command's variable would be ignored, silently: the notifier reads
    # KAIROS_NOTIFIER_METRICS_PORT, and KAIROS_METRICS_PORT would leave it without probes.
    unread = [
        f"{where}: {name}"
        for where, args, variables in _deployed_processes()
        for name in variables - _command_variables(args)
        if not name.startswith(KAFKA_PROPERTY_NAMESPACE)
    ]
    assert not unread, f"read by no option of their command: {unread}"
