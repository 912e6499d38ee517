"""``gpupool sim dynamic``: the policy engine under arrivals, completions and preemptions.

Options are checked before anything runs, and every error is one line that names the option or
the file and field (a bad pools-and-queues file says which object and field, as the API server
would).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpupool.cli.options import fail
from gpupool.core.constraints import NodeConstraints
from gpupool.scheduling.decisions import engine_options

if TYPE_CHECKING:
    from gpupool.core.model import NodeSpec, PodSpec
    from gpupool.policy.spec import ConsolidationSpec, PolicyConfig

sim_app = typer.Typer(help="Simulations of the cluster under a workload.", no_args_is_help=True)

BackfillMode = Annotated[
    str,
    typer.Option(
        help="large-pods (the control plane's default: up to 16 followed reservations for "
        "pods above one GPU, ends by age, p90 runtimes), easy (one reservation per pool) or "
        "strict (nothing starts behind a blocked pod); the options below change one part."
    ),
]
Reservations = Annotated[
    int | None, typer.Option(help="Blocked pods per pool holding a backfill reservation.")
]
FollowReservations = Annotated[
    bool | None, typer.Option(help="A reservation whose start passed stays with its pod.")
]
ReserveAboveUnits = Annotated[
    int | None,
    typer.Option(
        help="Only blocked pods asking for more milli-units (1000: one GPU) hold a "
        "reservation (0: every blocked pod that asks for a GPU)."
    ),
]
RemainingByAge = Annotated[
    bool | None,
    typer.Option(
        help="Reservations expect a running pod to end after its remaining runtime given how "
        "long it has run (off: at start plus its mean runtime, or now once past it)."
    ),
]
BackfillQuantile = Annotated[
    float | None,
    typer.Option(
        help="A pod starts on a reserved node only if this quantile of its learned runtime "
        "ends before the reserved start (easy: its mean)."
    ),
]
TeamNodeSelector = Annotated[
    list[str] | None,
    typer.Option(
        help="TEAM=KEY=VALUE: every pod of TEAM carries this node selector (repeat for more "
        "labels or teams); nodes carry gpupool.io/gpu-model and sim.gpupool.io/group."
    ),
]


Claims = Annotated[
    float,
    typer.Option(
        help="Share of the GPU and share pods that ask by a DRA claim instead of "
        "gpupool.io/gpu (0..1; the results must not change)."
    ),
]
AntiAffinity = Annotated[
    float,
    typer.Option(
        help="Share of the GPU pods in replica groups with required pod anti-affinity on "
        "kubernetes.io/hostname (0..1)."
    ),
]
Spread = Annotated[
    float,
    typer.Option(
        help="Share of the GPU pods in replica groups spread over kubernetes.io/hostname "
        "(DoNotSchedule, maxSkew 1; 0..1)."
    ),
]
Gangs = Annotated[
    float,
    typer.Option(
        help="Share of the multi-GPU pods that arrive as a gang of one-GPU pods which start "
        "together or not at all (0..1)."
    ),
]
NoGangReservations = Annotated[
    bool,
    typer.Option(
        "--no-gang-reservations",
        help="A gang that cannot start whole holds no backfill reservation.",
    ),
]
Governance = Annotated[
    bool,
    typer.Option(help="Apply the governance rules (with --idle-share/--overrun-share)."),
]
IdleShare = Annotated[
    float, typer.Option(help="Share of pods that linger idle after their work (0..1).")
]
OverrunShare = Annotated[
    float, typer.Option(help="Share of pods that hold their GPUs past maxShareDuration.")
]
Consolidation = Annotated[
    str | None,
    typer.Option(
        help="disabled, report-only or enabled: every pool's consolidation (moving running "
        "pods so that a pod waiting on fragments fits; default: each pool's own setting)."
    ),
]
RestartCost = Annotated[
    float,
    typer.Option(help="With --consolidation: GPU seconds a moved pod loses per GPU it holds."),
]
MovesPerHour = Annotated[
    int, typer.Option(help="With --consolidation: pods a pool moves in any hour at most.")
]


@sim_app.command("dynamic")
def sim_dynamic(
    nodes: Annotated[Path, typer.Option(help="openb node list CSV.")],
    pods: Annotated[Path, typer.Option(help="openb pod list CSV (pod shapes are drawn from it).")],
    json_out: Annotated[Path, typer.Option("--json", help="Write the metrics here.")],
    load: Annotated[float, typer.Option(help="Offered load, fraction of GPU capacity.")] = 1.0,
    hours: Annotated[float, typer.Option(help="Simulated hours.")] = 8.0,
    warmup: Annotated[float, typer.Option(help="Hours left out of the metrics.")] = 3.0,
    seed: Annotated[int, typer.Option(help="Seed of every draw.")] = 42,
    backfill: BackfillMode = "large-pods",
    reservations: Reservations = None,
    follow_reservations: FollowReservations = None,
    reserve_above_units: ReserveAboveUnits = None,
    remaining_by_age: RemainingByAge = None,
    backfill_quantile: BackfillQuantile = None,
    no_preemption: Annotated[
        bool, typer.Option("--no-preemption", help="No preemption or reclaim.")
    ] = False,
    no_gang_reservations: NoGangReservations = False,
    config: Annotated[
        Path | None,
        typer.Option(help="GPUPool/GPUQueue YAML (default: the bundled teams.yaml)."),
    ] = None,
    scale: Annotated[float, typer.Option(help="Fraction of the nodes simulated.")] = 0.25,
    policy: Annotated[str, typer.Option(help="Placement policy.")] = "default",
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of the delays here.")] = None,
    idle_share: IdleShare = 0.0,
    overrun_share: OverrunShare = 0.0,
    governance: Governance = True,
    team_node_selector: TeamNodeSelector = None,
    claims: Claims = 0.0,
    anti_affinity: AntiAffinity = 0.0,
    spread: Spread = 0.0,
    gangs: Gangs = 0.0,
    consolidation: Consolidation = None,
    restart_cost: RestartCost = 600.0,
    moves_per_hour: MovesPerHour = 32,
) -> None:
    """Poisson arrivals at --load, trace shapes, lognormal durations, pools and team queues."""
    from gpupool.sim.dynamic.governance_model import GovernanceModel
    from gpupool.sim.dynamic.pod_rules import PodRuleShares
    from gpupool.sim.dynamic.simulation import DynamicSettings, run_dynamic

    for option, path in (("--nodes", nodes), ("--pods", pods), ("--config", config)):
        if path is not None and not path.is_file():
            raise fail(f"{option}: no such file {path}")
    _check_policy(policy)
    try:
        wanted = idle_share or overrun_share
        model = GovernanceModel(idle_share, overrun_share, enforce=governance) if wanted else None
        engine = engine_options(
            backfill,
            preemption=not no_preemption,
            gang_reservations=not no_gang_reservations,
            **_reservation_changes(
                reservations, follow_reservations, reserve_above_units, remaining_by_age
            ),
            backfill_quantile=backfill_quantile,
        )
        settings = DynamicSettings(
            rho=load,
            hours=hours,
            seed=seed,
            engine=engine,
            warmup_hours=warmup,
            scale=scale,
            policy=policy,
            governance=model,
            team_constraints=team_selectors(team_node_selector or []),
            claims=claims,
            pod_rules=PodRuleShares(anti_affinity, spread),
            gangs=gangs,
            consolidation=_consolidation(consolidation, restart_cost, moves_per_hour),
        )
    except ValueError as error:
        raise fail(_option_error(error)) from None
    report = run_dynamic(*_inputs(nodes, pods, config), settings)
    _write(report, json_out, plot)


def _reservation_changes(
    per_pool: int | None, follow: bool | None, above: int | None, by_age: bool | None
) -> dict[str, Any]:
    """The reservation options as changes to the backfill mode's engine options."""
    return {
        "reservations_per_pool": per_pool,
        "reservations_follow_pods": follow,
        "reserve_above_units": above,
        "remaining_by_age": by_age,
    }


CONSOLIDATION_MODES = {"disabled": "OFF", "report-only": "REPORT_ONLY", "enabled": "ON"}


def _consolidation(
    mode: str | None, restart_cost: float, moves_per_hour: int
) -> ConsolidationSpec | None:
    """Every pool's consolidation settings from the options (``None``: the pools' own)."""
    from gpupool.policy.spec import ConsolidationMode, ConsolidationSpec

    if mode is None:
        return None
    if mode not in CONSOLIDATION_MODES:
        raise ValueError(f"consolidation: choose one of {', '.join(CONSOLIDATION_MODES)}")
    if not restart_cost >= 0:
        raise ValueError(f"restart_cost: must be >= 0, got {restart_cost}")
    if moves_per_hour < 1:
        raise ValueError(f"moves_per_hour: must be >= 1, got {moves_per_hour}")
    return ConsolidationSpec(
        mode=ConsolidationMode[CONSOLIDATION_MODES[mode]],
        restart_cost=restart_cost,
        max_moves_per_hour=moves_per_hour,
    )


def _inputs(
    nodes: Path, pods: Path, config: Path | None
) -> tuple[tuple[NodeSpec, ...], tuple[PodSpec, ...], PolicyConfig]:
    """The trace's nodes and pod shapes and the pools and queues; a bad file is named."""
    from gpupool.policy.spec_reader import PolicyConfigError
    from gpupool.sim.policy_file import load_policy
    from gpupool.sim.trace import TraceFormatError, read_nodes, read_pods

    try:
        pools_and_queues = load_policy(config)
        return read_nodes(nodes), read_pods(pods), pools_and_queues
    except (PolicyConfigError, TraceFormatError) as error:
        raise fail(str(error)) from None


def _check_policy(policy: str) -> None:
    from gpupool.scheduling.registry import policy_names

    if policy not in policy_names():
        raise fail(
            f"--policy: unknown policy {policy!r}; choose one of {', '.join(policy_names())}"
        )


_OPTIONS = {
    "rho": "--load",
    "reservations_per_pool": "--reservations",
    "reservations_follow_pods": "--follow-reservations",
    "reserve_above_units": "--reserve-above-units",
    "backfill_quantile": "--backfill-quantile",
    "warmup_hours": "--warmup",
    "idle_share": "--idle-share",
    "overrun_share": "--overrun-share",
    "anti_affinity": "--anti-affinity",
    "anti_affinity + spread": "--anti-affinity + --spread",
    "team_node_selector": "--team-node-selector",
    "restart_cost": "--restart-cost",
    "moves_per_hour": "--moves-per-hour",
}
"""Settings whose option has another name."""


def _option_error(error: ValueError) -> str:
    """A settings error (``field: message``) with the option's name in front."""
    name, _, message = str(error).partition(": ")
    return f"{_OPTIONS.get(name, '--' + name)}: {message}"


def _write(report: dict[str, Any], json_out: Path, plot: Path | None) -> None:
    _print_summary(report)
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    typer.echo(f"wrote {json_out}", err=True)
    if plot is not None:
        _plot(report, plot)
        typer.echo(f"wrote {plot}", err=True)


def team_selectors(options: list[str]) -> tuple[tuple[str, NodeConstraints], ...]:
    """Per team, the node selector its ``--team-node-selector TEAM=KEY=VALUE`` options name.

    Raises:
        ValueError: An option is not ``TEAM=KEY=VALUE`` (the message names the option).
    """
    selectors: dict[str, dict[str, str]] = {}
    for option in options:
        team, _, label = option.partition("=")
        key, equals, value = label.partition("=")
        if not (team and key and equals):
            raise ValueError(f"team_node_selector: expected TEAM=KEY=VALUE, got {option!r}")
        selectors.setdefault(team, {})[key] = value
    return tuple((team, NodeConstraints.of(labels)) for team, labels in sorted(selectors.items()))


def _print_summary(report: dict[str, Any]) -> None:
    typer.echo(
        f"load {report['rho']}, {report['hours']} h, seed {report['seed']}: "
        f"GPU utilisation {report['gpu_utilisation']:.1f}%, Jain {report['jain_fairness']:.3f}, "
        f"preemptions {report['preemptions']} "
        f"({report['gpu_hours_lost_to_preemption']:.1f} GPU-hours lost), "
        f"quota overrun {report['quota_overrun_max']:g}, wall {report['wall_seconds']:.1f} s"
    )
    for name, cell in report["queue_delay_s"].items():
        if cell["count"]:
            typer.echo(f"  queue {name}: delay p50 {cell['p50']:.0f} s, p95 {cell['p95']:.0f} s")


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = {k: v for k, v in report["queue_delay_s"].items() if v["count"]}
    figure, axis = plt.subplots(figsize=(6, 3.5))
    names = list(cells)
    axis.bar(names, [cells[n]["p95"] for n in names], label="p95")
    axis.bar(names, [cells[n]["p50"] for n in names], label="p50")
    axis.set_ylabel("queue delay, s")
    axis.set_title(
        f"load {report['rho']}, utilisation {report['gpu_utilisation']:.1f}%, seed {report['seed']}"
    )
    axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
