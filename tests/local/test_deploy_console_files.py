"""The console in the shipped deploy files, checked without a Docker engine or a cluster: it acts
as its users' teams with keys of those teams (never one signing key), from files only it may
read, answering the host names it is reached by (docs/console.md, docs/deploy.md)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate

from kairos.services.console.identity import Users
from kairos.services.console.settings import host_list
from kairos.streams.wire.signing import load_signer, new_signing_key
from tests.deploy_files import (
    by_kind,
    compose,
    compose_admin_steps,
    kubernetes_environment,
    local_path,
    pod_templates,
    run_init_containers,
    secret_names,
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
)


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
    assert {"KAIROS_CONSOLE_USERS_FILE", "KAIROS_TEAM_KEYS"} <= checked


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
