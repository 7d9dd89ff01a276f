"""`kairos dev …`: the embedded local environment for development and tests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kairos.cli.dev_up import up
from kairos.cli.exit_codes import ExitCode
from kairos.cli.options import fail
from kairos.devinfra.kafka_broker import DEFAULT_DATA_DIR, LocalKafka, LocalKafkaError
from kairos.devinfra.kafka_cluster import ClusterStatus, LocalCluster, Security
from kairos.devinfra.kafka_cluster_users import ADMIN_USER

app = typer.Typer(help="Run Kairos locally on its embedded defaults.", no_args_is_help=True)
kafka_app = typer.Typer(
    help="A real Kafka broker, or a cluster of several, on loopback (KRaft, no Docker).",
    no_args_is_help=True,
)
app.add_typer(kafka_app, name="kafka")
app.command("up")(up)

DataDirOption = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        envvar="KAIROS_KAFKA_DATA_DIR",
        help="Where the broker or cluster keeps its storage, config, pids and logs.",
    ),
]


def _cluster_at(data_dir: Path) -> LocalCluster | None:
    try:
        return LocalCluster.at(data_dir)
    except LocalKafkaError as error:
        raise fail(str(error)) from error


def _describe_started(status: ClusterStatus, started: bool) -> None:
    """Where everything is, on stderr; stdout keeps only the bootstrap list, for scripts."""
    if not started:
        typer.echo("already running; not starting another", err=True)
    nodes = ", ".join(f"node {n.node_id} pid {n.pid}" for n in status.nodes)
    typer.echo(f"{len(status.nodes)} nodes ({nodes}), security {status.security}", err=True)
    if status.security is Security.SASL_SSL:
        typer.echo(
            f"client properties (librdkafka, mode 0600): {status.data_dir}/client-<user>.properties"
            f"; the super user's is {status.data_dir}/client-{ADMIN_USER}.properties",
            err=True,
        )
    typer.echo(status.bootstrap_servers)


@kafka_app.command("start")
def kafka_start(
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
    port: Annotated[
        int | None,
        typer.Option(
            help="Listener port; a free one when omitted. A cluster of N nodes uses 3N "
            "consecutive ports from it: client ports first, then inter-broker, then controller."
        ),
    ] = None,
    brokers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="How many combined broker+controller nodes (default: as the data "
            "directory holds, else 1).",
        ),
    ] = None,
    security: Annotated[
        Security | None,
        typer.Option(
            help="sasl_ssl: TLS with SCRAM-SHA-512 users and ACLs enforced (default: as the "
            "data directory holds, else plaintext)."
        ),
    ] = None,
) -> None:
    """Start the broker or cluster and print its bootstrap servers.

    The first start resolves Kafka's jars from Maven Central; later ones reuse them.
    """
    existing = _cluster_at(data_dir)
    brokers = brokers or (existing.brokers if existing else 1)
    security = security or (existing.security if existing else Security.PLAINTEXT)
    try:
        if brokers == 1 and security is Security.PLAINTEXT and existing is None:
            broker_status, started = LocalKafka(data_dir=data_dir, port=port).start()
            if not started:
                typer.echo(
                    f"already running (pid {broker_status.pid}); not starting another", err=True
                )
            typer.echo(broker_status.bootstrap_servers)
            return
        status, started = LocalCluster(data_dir, brokers, security, port).start()
    except LocalKafkaError as error:
        raise fail(str(error)) from error
    _describe_started(status, started)


@kafka_app.command("stop")
def kafka_stop(data_dir: DataDirOption = DEFAULT_DATA_DIR) -> None:
    """Stop the broker, or every node of the cluster, cleanly."""
    cluster = _cluster_at(data_dir)
    stopped = cluster.stop() if cluster else LocalKafka(data_dir=data_dir).stop()
    typer.echo("stopped" if stopped else "not running")


@kafka_app.command("status")
def kafka_status(data_dir: DataDirOption = DEFAULT_DATA_DIR) -> None:
    """Say whether the broker (or each node) runs, where, and where its log is.

    Exits 1 unless everything runs.
    """
    cluster = _cluster_at(data_dir)
    if cluster is None:
        status = LocalKafka(data_dir=data_dir).status()
        if not status.running:
            typer.echo(f"not running (data directory {status.data_dir})")
            raise typer.Exit(ExitCode.FINDING)
        typer.echo(
            f"running at {status.bootstrap_servers} (pid {status.pid}); log {status.log_file}"
        )
        return
    cluster_status = cluster.status()
    for node in cluster_status.nodes:
        state = f"running (pid {node.pid})" if node.running else "not running"
        typer.echo(
            f"node {node.node_id} at 127.0.0.1:{node.client_port}: {state}; log {node.log_file}"
        )
    running = sum(node.running for node in cluster_status.nodes)
    typer.echo(
        f"{running} of {len(cluster_status.nodes)} nodes running, security "
        f"{cluster_status.security}; bootstrap {cluster_status.bootstrap_servers}"
    )
    if not cluster_status.running:
        raise typer.Exit(ExitCode.FINDING)


@kafka_app.command("add-user")
def kafka_add_user(
    name: Annotated[str, typer.Argument(help="The SCRAM user name (it starts without ACLs).")],
    data_dir: DataDirOption = DEFAULT_DATA_DIR,
) -> None:
    """Create a SCRAM-SHA-512 user on the running secured cluster; print its properties file.

    The password is generated and written only into that librdkafka file (mode 0600).
    """
    cluster = _cluster_at(data_dir)
    if cluster is None:
        raise fail(
            f"{data_dir} holds no local cluster; start one with "
            f"`kairos dev kafka start --brokers 3 --security sasl_ssl --data-dir {data_dir}`"
        )
    try:
        path, created = cluster.add_user(name)
    except LocalKafkaError as error:
        raise fail(str(error)) from error
    if not created:
        typer.echo(f"user {name!r} exists already; its password is unchanged", err=True)
    typer.echo(path)
