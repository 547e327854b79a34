"""The ``arlarena report`` subcommand: ``arlarena report RUNS... -o DIR``."""

from __future__ import annotations

import argparse
from pathlib import Path

from arlarena_jax.arena.report.collapse import (
    COLLAPSE_KINDS,
    SuccessCollapse,
    collapse_kinds,
    monitor_overrides,
)


def report_command(args: argparse.Namespace) -> int:
    """Build the report; print where it went and one line per group."""
    from arlarena_jax.arena.report.build import build_report

    rule = SuccessCollapse(args.success_drop, args.success_min_best, args.success_window)
    report = build_report(
        args.runs,
        args.out,
        title=args.title,
        baseline=args.baseline,
        rule=rule,
        plots=not args.no_plots,
        embed_images=args.embed_images,
        ignore_keys=args.ignore_key,
        monitor=monitor_overrides(args.monitor),
        collapse_on=collapse_kinds(args.collapse_on),
        against=args.against,
    )
    for row in report.rows:
        final = row.success["final"].mean
        shown = "–" if final is None else f"{final * 100:.1f}%"
        print(f"{row.group.env:<10} {row.group.label:<32} n={len(row.group.runs)} final {shown}")
    runs = f"{len(report.runs)} run{'' if len(report.runs) == 1 else 's'}"
    print(f"wrote {args.out / 'report.html'} and {args.out / 'report.md'} ({runs})")
    return 0


def add_command(commands) -> None:
    """Register ``report`` on the ``arlarena`` parser's subparsers."""
    sub = commands.add_parser(
        "report", help="tables, collapse detection and plots of finished or running runs"
    )
    sub.add_argument("runs", nargs="+", type=Path, help="run directories or folders above them")
    sub.add_argument("-o", "--out", type=Path, required=True, help="folder to write the report")
    sub.add_argument("--title", default="ARLArena report", help="the report's title")
    sub.add_argument(
        "--baseline", default="grpo", help="method of the relative change column (default grpo)"
    )
    sub.add_argument(
        "--ignore-key",
        action="append",
        default=[],
        metavar="KEY",
        help="a dotted config key whose differences do not set runs apart (repeatable; "
        "trainer.seed, trainer.rl_seed, trainer.run_dir and sft.init_from never do)",
    )
    sub.add_argument(
        "--monitor",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="a stability-monitor threshold for the replay, over each run's own (repeatable; "
        "e.g. entropy_collapse_fraction=0.05 or kl_bound=null: null switches a detector off)",
    )
    sub.add_argument(
        "--collapse-on",
        action="append",
        default=[],
        metavar="KIND",
        help="an event kind that counts as a collapse, the others being warnings (repeatable or "
        "comma-separated; e.g. held_out_success_drop,held_out_format_drop to judge runs by their "
        f"held-out evaluations; default {','.join(sorted(COLLAPSE_KINDS))})",
    )
    sub.add_argument(
        "--against",
        metavar="KEY",
        help="the numeric config key to show the test end point against, e.g. sft.num_episodes "
        "(default: found from the runs, the numeric key with most values, ties by name)",
    )
    sub.add_argument("--no-plots", action="store_true", help="tables only, no figures")
    sub.add_argument(
        "--embed-images",
        action="store_true",
        help="embed the PNGs in report.html (data URIs) instead of linking plots/*.png",
    )
    _add_success_rule(sub)
    sub.set_defaults(handler=report_command)


def _add_success_rule(sub) -> None:
    """The ``success_collapse`` thresholds, defaulting to :class:`SuccessCollapse`'s."""
    rule = SuccessCollapse()
    sub.add_argument(
        "--success-drop",
        type=float,
        default=rule.drop,
        help="success_collapse: fall of the windowed training success below its best "
        f"(absolute, default {rule.drop})",
    )
    sub.add_argument(
        "--success-min-best",
        type=float,
        default=rule.min_best,
        help=f"success_collapse: the best must have reached this first (default {rule.min_best})",
    )
    sub.add_argument(
        "--success-window",
        type=int,
        default=rule.window,
        help=f"success_collapse: logged steps averaged (default {rule.window})",
    )
