"""``hlo-run`` on a module that runs on R x P participants (``--num-replicas``/``--num-partitions``,
by default the module header's ``replica_count``/``num_partitions``).

Every participant runs the module on its own inputs: ``p{k}.arg{i}`` from ``--input-literals``
where present, else the shared ``arg{i}``; generated inputs differ per participant (seed + k).
Each participant's results are compared with the reference's for the same participant, and
written as ``p{k}.out{j}``. The interpreter and the host run every participant in this process
(one thread each); cuda needs one GPU per participant: one process per GPU, spawned, or the
ranks of an MPI launcher (``mpirun -n R*P hlo-run --platform=cuda ...``; rank 0 writes).
"""
from __future__ import annotations

from typing import Any, Callable

import click

from ..hlo.collective_groups import World
from .common import EXIT_MISMATCH, EXIT_OK, UserError


def _inputs(module, s, world: World, iteration: int) -> list[list[Any]]:
    from ..runtime import literals
    out = []
    for k in range(world.size):
        if s.input_literals:
            out.append(literals.load_inputs(s.input_literals, module, participant=k))
        elif not s.random_inputs:
            out.append(literals.zero_inputs(module))
        else:
            out.append(literals.random_inputs(module, (s.seed or 0) + k, iteration=iteration,
                                              large_float_range=s.large_float_range))
    return out


def _runner(platform: str, module, world: World, s) -> Callable[[list, int | None], list]:
    if platform == "interpreter":
        from ..interpreter.evaluator import evaluate_spmd
        states = [{} for _ in range(world.size)]  # rng-get-and-update-state persists across runs
        return lambda args, seed: evaluate_spmd(module, lambda k: args[k], world, seed=seed, rng_states=states)
    from ..options import CompileOptions
    from ..runtime.spmd_run import compile_spmd
    from . import common
    options = CompileOptions(arch=common.default_arch(), fusion=s.fusion, gemm=s.gemm, conv=s.conv)
    run = compile_spmd(module, platform, world, options)
    return lambda args, seed: run(args)


def _lead(platform: str) -> bool:
    if platform != "cuda":
        return True
    from ..runtime.spmd_run import lead_process
    return lead_process()


def run_spmd(module, s, world: World, compare: Callable, rule_text: Callable, rng_seed: Callable) -> int:
    """Run ``module`` on every participant of ``world`` per ``s`` (hlo-run's ``RunSettings``);
    ``compare``, ``rule_text``, ``rng_seed``: hlo-run's own. Returns the exit status."""
    from ..runtime import literals
    if s.use_cuda_graph:
        raise UserError(f"{module.name}: --use-cuda-graph runs one device; the module runs on {world.size} "
                        "participants")
    click.echo(f"{module.name}: {world.replicas} replica(s) x {world.partitions} partition(s) = {world.size} "
               f"participants", err=True)
    run = _runner(s.platform, module, world, s)
    reference = None if s.reference in ("none", s.platform) else _runner(s.reference, module, world, s)
    failures = compared = 0
    rule, results = "", None
    for i in range(s.iterations):
        args = _inputs(module, s, world, i)
        seed = rng_seed(s, i)
        results = run(args, seed)
        if s.print_literals:
            for k, r in enumerate(results):
                click.echo(f"participant {k}: " + "; ".join(str(a) for a in literals.flatten(r)))
        if reference is None:
            continue
        expected = reference(args, seed)
        for k in range(world.size):
            want, got = literals.flatten(expected[k]), literals.flatten(results[k])
            rule = rule_text(s, want)
            cmp = compare(s, want, got)
            compared += 1
            if not cmp.ok:
                failures += 1
                click.echo(f"participant {k}:\n{cmp.report()}", err=True)
    if s.output_literals and _lead(s.platform):  # under MPI every rank has every result: rank 0 writes
        try:
            literals.save_participant_outputs(s.output_literals, results)
        except OSError as e:
            raise UserError(f"cannot write output literals {s.output_literals}: {e.strerror or e}") from None
    if reference is None:
        click.echo(f"{module.name}: ran on {s.platform} ({world.size} participants); not compared", err=True)
        return EXIT_OK
    if failures:
        click.echo(f"{module.name}: {failures}/{compared} participant results differ from the {s.reference} "
                   f"reference ({rule})", err=True)
        return EXIT_MISMATCH
    click.echo(f"{module.name}: results of all {world.size} participants match the {s.reference} reference "
               f"({rule})", err=True)
    return EXIT_OK
