"""`kairos acls ROLE`: the least-privilege ACLs of a role, printed or created."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kairos.cli.exit_codes import ExitCode
from kairos.cli.options import JsonOption, fail, kafka_settings
from kairos.streams.kafka.acls import DeploymentNames, Grant, Pattern, Resource, Role, role_grants
from kairos.streams.kafka.permissions import PermissionCheckError, check_grants
from kairos.streams.kafka.settings import KafkaSettings

_RESOURCE_TYPES = {
    Resource.TOPIC: ResourceType.TOPIC,
    Resource.GROUP: ResourceType.GROUP,
    Resource.TRANSACTIONAL_ID: ResourceType.TRANSACTIONAL_ID,
}
_PATTERNS = {
    Pattern.LITERAL: ResourcePatternType.LITERAL,
    Pattern.PREFIXED: ResourcePatternType.PREFIXED,
}


def acl_binding(grant: Grant, principal: str) -> AclBinding:
    return AclBinding(
        _RESOURCE_TYPES[grant.resource],
        grant.name,
        _PATTERNS[grant.pattern],
        principal,
        "*",
        AclOperation[grant.operation.value],
        AclPermissionType.ALLOW,
    )


def create_acls(admin: AdminClient, grants: list[Grant], principal: str, timeout_s: float) -> None:
    """Create the grants' ACLs for `principal` (creating an existing ACL is a no-op)."""
    futures = admin.create_acls(
        [acl_binding(grant, principal) for grant in grants], request_timeout=timeout_s
    )
    for future in futures.values():
        future.result(timeout=timeout_s)


def acls(
    context: typer.Context,
    role: Annotated[Role, typer.Argument(help="ticker, executor, producer, auditor or operator.")],
    principal: Annotated[
        str, typer.Option(help="The principal to grant, e.g. User:ticker (with --apply).")
    ] = "User:NAME",
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Create the ACLs on the cluster (needs ALTER on the cluster: a cluster admin's "
            "client properties).",
        ),
    ] = False,
    group_id: Annotated[
        str | None,
        typer.Option(
            help="The ticker's or executor's consumer group, when its --group-id is not the "
            "deployment's default.",
            show_default=False,
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Ask the cluster which of them the principal this command connects as lacks; "
            "exit 1 when any is missing.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """The ACLs a role needs in this deployment, and nothing more (docs/operations.md#acls)."""
    settings = kafka_settings(context)
    names = DeploymentNames.of(
        settings,
        ticker_group=group_id if role is Role.TICKER else None,
        executor_group=group_id if role is Role.EXECUTOR else None,
    )
    grants = role_grants(role, names)
    if check:
        _check(settings, role, names)
        return
    if apply:
        if not principal.startswith("User:") or principal == "User:NAME":
            raise fail("--apply needs --principal User:<name>, the principal to grant")
        try:
            create_acls(AdminClient(settings.consumer_config()), grants, principal, 30.0)
        except KafkaException as error:
            raise fail(f"could not create the ACLs: {error.args[0].str()}") from error
    if as_json:
        typer.echo(json.dumps([_document(grant, principal) for grant in grants], indent=2))
        return
    for grant in grants:
        typer.echo(f"allow {principal} {grant.describe():<56} # {grant.why}")
    if apply:
        typer.echo(f"created {len(grants)} ACLs for {principal}")


def _check(settings: KafkaSettings, role: Role, names: DeploymentNames) -> None:
    try:
        admin = AdminClient(settings.consumer_config())
        checked = check_grants(admin, role_grants(role, names), names, 30.0)
    except (KafkaException, PermissionCheckError) as error:
        raise fail(f"could not check the {role}'s ACLs: {error}") from error
    for grant in checked.missing:
        typer.echo(f"missing: {grant.describe()}  # {grant.why}")
    for grant in checked.unchecked:
        typer.echo(f"not checkable from here: {grant.describe()}  # {grant.why}")
    if checked.missing:
        raise fail(
            f"the {role} lacks {len(checked.missing)} of its ACLs: grant them with "
            f"`kairos acls {role} --principal User:<name> --apply`",
            ExitCode.FINDING,
        )
    typer.echo(f"the {role} holds every ACL checked")


def _document(grant: Grant, principal: str) -> dict[str, str]:
    return {
        "principal": principal,
        "resource": grant.resource.value,
        "name": grant.name,
        "pattern": grant.pattern.value,
        "operation": grant.operation.value,
        "why": grant.why,
    }
