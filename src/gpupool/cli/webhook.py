"""``gpupool webhook``: serve the admission webhook; ``gpupool webhook install``: register it.

Serving is the group's own action (``gpupool webhook --tls-cert ... --tls-key ...``) so the
Deployment's command stays short; ``install`` writes the webhook configurations with the CA
bundle and the failure policy. FastAPI and uvicorn (the ``web`` extra) are imported only when
serving.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpupool.cli.options import LogLevel, fail, log_level_of, start_logging

if TYPE_CHECKING:
    from gpupool.webhook.configuration import WebhookTarget

webhook_app = typer.Typer(
    help="The admission webhook: route, label and check pods that ask for gpupool resources."
)


def _existing(option: str, path: Path | None) -> Path:
    if path is None:
        raise fail(f"{option}: required")
    if not path.is_file():
        raise fail(f"{option}: no such file {path}")
    return path


@webhook_app.callback(invoke_without_command=True)
def webhook(
    context: typer.Context,
    tls_cert: Annotated[
        Path | None, typer.Option(help="Serving certificate (PEM) the API server verifies.")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Its private key (PEM).")] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="Cluster to read nodes and queues from (default: in-cluster)."),
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8443,
    scheduler_name: Annotated[str, typer.Option(help="schedulerName given to pods.")] = "gpupool",
    default_class: Annotated[
        str, typer.Option(help="gpupool.io/class label for pods without one ('' = none).")
    ] = "default",
    check_nodes: Annotated[
        bool,
        typer.Option(
            "--check-nodes/--no-check-nodes",
            help="Refuse GPU models, MIG profiles and sizes no node has (off with autoscaling).",
        ),
    ] = True,
    log_level: LogLevel = "info",
) -> None:
    """Serve the admission webhook over TLS (or run a subcommand)."""
    if context.invoked_subcommand is not None:
        return
    cert, key = _existing("--tls-cert", tls_cert), _existing("--tls-key", tls_key)
    if kubeconfig is not None:
        _existing("--kubeconfig", kubeconfig)
    if not 1 <= port <= 65535:
        raise fail(f"--port: must be 1..65535, got {port}")
    if not scheduler_name:
        raise fail("--scheduler-name: must not be empty")
    start_logging(log_level_of(log_level))
    from gpupool.kube.client.serving_tls import CertificateError
    from gpupool.webhook.admission import AdmissionConfig
    from gpupool.webhook.server import WebhookServerConfig, serve

    config = WebhookServerConfig(
        tls_cert=cert,
        tls_key=key,
        kubeconfig=kubeconfig,
        host=host,
        port=port,
        admission=AdmissionConfig(scheduler_name, default_class, check_nodes),
    )
    try:
        code = asyncio.run(serve(config))
    except CertificateError as error:
        raise fail(str(error)) from None
    raise typer.Exit(code)


@webhook_app.command("install")
def install(
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Kubeconfig of the cluster (not with --print).")
    ] = None,
    ca: Annotated[
        Path | None, typer.Option(help="PEM of the CA that signed the serving cert.")
    ] = None,
    inject_ca_from: Annotated[
        str, typer.Option(help="namespace/certificate whose CA cert-manager injects instead.")
    ] = "",
    print_only: Annotated[
        bool, typer.Option("--print", help="Print the configurations as YAML; apply nothing.")
    ] = False,
    url: Annotated[str, typer.Option(help="https://host:port of the webhook.")] = "",
    service: Annotated[
        str, typer.Option(help="namespace/name[:port] of the webhook's Service.")
    ] = "",
    failure_policy: Annotated[
        str, typer.Option(help="Fail (closed, default) or Ignore (open) while it is down.")
    ] = "Fail",
    timeout: Annotated[int, typer.Option(help="Seconds the API server waits (1..30).")] = 5,
    namespace: Annotated[
        str, typer.Option(help="The webhook's own namespace (never sent to it).")
    ] = "gpupool-system",
    name: Annotated[str, typer.Option(help="Name of both configurations.")] = "gpupool",
    scheduler_name: Annotated[str, typer.Option(help="gpupool's schedulerName.")] = "gpupool",
) -> None:
    """Create or update the Mutating- and ValidatingWebhookConfiguration (or --print them)."""
    from gpupool.kube.client.api import ApiError, KubeAPI
    from gpupool.webhook.configuration import (
        FAILURE_POLICIES,
        install_webhook,
        webhook_configurations,
    )

    if ca is None and not inject_ca_from:
        raise fail("--ca: required (or --inject-ca-from with cert-manager)")
    ca_bundle = None if ca is None else _existing("--ca", ca).read_bytes()
    policy = next((p for p in FAILURE_POLICIES if p == failure_policy), None)
    if policy is None:
        raise fail(f"--failure-policy: must be Fail or Ignore, got {failure_policy!r}")
    if not 1 <= timeout <= 30:
        raise fail(f"--timeout: must be 1..30, got {timeout}")
    try:
        target = _target(url, service)
    except ValueError as error:
        raise fail(f"--url/--service: {error}") from None
    configurations = webhook_configurations(  # the arguments are checked above
        ca_bundle,
        target,
        inject_ca_from=inject_ca_from,
        name=name,
        failure_policy=policy,
        timeout_seconds=timeout,
        webhook_namespace=namespace,
        scheduler_name=scheduler_name,
    )

    if print_only:
        import yaml

        typer.echo(yaml.safe_dump_all(configurations.values(), sort_keys=False), nl=False)
        return
    cluster = _existing("--kubeconfig", kubeconfig)

    async def run() -> None:
        api = KubeAPI.from_kubeconfig(cluster)
        try:
            await install_webhook(api, configurations)
        finally:
            await api.close()

    try:
        asyncio.run(run())
    except ApiError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"installed webhook configurations {name!r} (failurePolicy {policy})")


def _target(url: str, service: str) -> WebhookTarget:
    from gpupool.webhook.configuration import WebhookTarget

    if not service:
        return WebhookTarget(url=url)
    if url:
        raise ValueError("give --url or --service, not both")
    location, _, port = service.partition(":")
    service_namespace, _, service_name = location.partition("/")
    if not service_name or (port and not port.isdigit()):
        raise ValueError(f"--service: expected namespace/name[:port], got {service!r}")
    return WebhookTarget(
        service_namespace=service_namespace,
        service_name=service_name,
        service_port=int(port) if port else 443,
    )
