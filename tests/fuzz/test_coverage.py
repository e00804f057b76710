"""The fuzzer's generators reach every strategy of the targets and every graph-pass rewrite
(tests/fuzz/coverage.py): a fixed-seed run of short programs, round robin over the generators,
each checked by the derivatives check (outputs, gradient and double gradient on ONNX Runtime
against the float64 reference evaluator), until everything has been reached. tools/fuzz.py
reports the same counts over its random programs."""
import importlib

from gcompile.passes import PIPELINES

from .checks import run_program
from .coverage import PASSES, REWRITES, all_rewrites, all_strategies
from .programs import CONTROL_FLOW, GENERATORS, Gen, RandomDraw

MAX_ROUNDS = 45     # seeds per generator at most (each threshold a strategy adds dilutes the others' draws)
ALL_ROUNDS = 6      # rounds of every generator
STEPS = 3           # steps of the generator in each program


def test_every_counted_rewrite_exists_and_every_pass_is_counted():
    for module_name, functions in REWRITES.items():
        module = importlib.import_module(module_name)
        for name in functions:
            assert callable(getattr(module, name, None)), f"{module_name}.{name} is gone: update tests/fuzz/coverage.py"
    for pipeline in PIPELINES.values():
        for p in pipeline:
            assert p.__name__ in PASSES or p.__module__ in REWRITES, \
                f"the pass {p.__module__}.{p.__name__} is not counted: add it or its rewrites to tests/fuzz/coverage.py"


def _short_program(generator, seed: int):
    """A tanh of a new input (it keeps gradients from being constants that constant folding
    computes), then STEPS steps of `generator` on the values so far, the values no step read the
    outputs; None where the generator never applied."""
    g = Gen(RandomDraw(seed))
    x = g.new_input(g.random_shape())
    g.add("tanh", f"F.tanh({x.name})", f"np.tanh({x.name})", x.shape, 1.0, [x])
    if sum(generator(g, g.pick()) is not None for _ in range(STEPS)) == 0:
        return None
    read = {a for step in g.program.steps for a in step.args}
    g.program.outputs = [step.name for step in g.program.steps if step.name not in read]
    return g.program.pruned()


def test_the_generators_reach_every_strategy_and_rewrite():
    """After ALL_ROUNDS rounds of every generator, the next rounds run only the generators whose
    programs lowered the op of a strategy not reached yet (in its plain form), or fired another
    rewrite of the module of a rewrite not reached yet (loops._prune's programs for _hoist_one)."""
    strategies, rewrites = set(all_strategies()), set(all_rewrites())
    reached: set = set()
    lowered: dict = {}                      # op -> the generators whose programs lowered it
    fired: dict = {}                        # a rewrite's module -> the generators whose programs fired one
    generators = list(dict.fromkeys(GENERATORS + CONTROL_FLOW))
    for seed in range(MAX_ROUNDS):
        if seed >= ALL_ROUNDS:
            wanted_ops = {op for op, _ in strategies - reached}
            wanted_modules = {str(r).split(".")[0] for r in rewrites - reached}
            generators = [gen for gen in generators if any(gen in lowered.get(op, ()) for op in wanted_ops)
                          or any(gen in fired.get(module, ()) for module in wanted_modules)]
        for generator in generators:
            program = _short_program(generator, seed)
            if program is None:
                continue
            result = run_program(program, seed, checks=("derivatives",))
            assert not result.failures, f"{result.failures[0].message}\n{program.source('gc')}"
            reached |= {key for key in result.lowerings if key[1] != "plain"} | set(result.rewrites)
            for op, _ in result.lowerings:
                lowered.setdefault(op, set()).add(generator)
            for rewrite in result.rewrites:
                fired.setdefault(str(rewrite).split(".")[0], set()).add(generator)
        if (strategies | rewrites) <= reached:
            break
    missing = sorted(map(str, (strategies | rewrites) - reached))
    assert not missing, f"no generated program reached: {', '.join(missing)} (tests/fuzz/programs.py)"
