"""The checkers the notebooks call: ``check`` and one ``check_*`` per exercise, and the
kernel-8 sweep of exercise 4."""
from dataclasses import replace

from ..errors import InputError
from .cases import cases as make_cases
from .cases import student_launch
from .compile_errors import cell_line_offset, format_compile_error
from .declaration import compile_check
from .jobs import job_directory, make_job, run_job
from .judge import Attempt, indent, judge
from .solutions import resolve
from .spec import DEFAULT_TIMEOUT, EXERCISES, configure, exercise, variant_label
from .timing import timings, verdict


def check(key, source, *, timeout=DEFAULT_TIMEOUT, sanitize=None, timing=True, quiet=False,
          use_solution=None, raises=True, **config):
    """Check ``source`` (CUDA C, a string) for exercise ``key``; see attnlab.exercises.

    timeout: seconds for the subprocess (compile, runs, timing) before it is killed;
    sanitize: None = run compute-sanitizer only to explain a crash or a race, True = always
    (slow), False = never; timing: also validate at B=4 T=1024 C=768 NH=12 and time the
    kernel there against the series' kernel; use_solution: None = follow
    ATTNLAB_EXERCISE_SOLUTIONS, False = check ``source`` whatever it says, True = check the
    reference solution; raises: a wrong kernel raises ExerciseFailed (False: the failing
    CheckResult is printed and returned); config: the exercise's launch choices
    (block_size, t_per_block, beat).
    """
    ex = exercise(key)
    if not isinstance(source, str):
        raise InputError(f"the kernel source must be a string (the CUDA C code), got "
                         f"{type(source).__name__}")
    source, config, filename, substituted = resolve(ex, source, config, use_solution)
    cfg, defines = configure(ex, config)
    attempt = Attempt(ex, source, filename, None if substituted else cell_line_offset(source),
                      substituted, timeout=timeout, sanitize=sanitize, quiet=quiet, raises=raises)
    problem = compile_check(ex, source, filename, defines, attempt.offset)
    if problem:
        return attempt.finish(problem[0], indent(problem[1]))
    attempt.cases = make_cases(ex, cfg, timing)
    attempt.variants = [dict(label=variant_label(cfg), defines=defines,
                             grids=[c.grid for c in attempt.cases],
                             blocks=[c.block for c in attempt.cases])]
    job = make_job(ex, source, filename, attempt.cases, attempt.variants, timing=timing)
    with job_directory() as jobdir:
        attempt.outcome = run_job(job, timeout, jobdir)
        return judge(attempt)


def check_permute(source, **kw):
    """Exercise 1: ``permute_kernel`` splits inp (B, N, 3C) into q, k, v (B, NH, N, d)."""
    return check("e1_permute", source, **kw)


def check_softmax_forward(source, **kw):
    """Exercise 2: ``softmax_forward`` computes att from preatt, one thread per row."""
    return check("e2_softmax_forward", source, **kw)


def check_kernel7(source, *, block_size=256, **kw):
    """Exercise 3: softmax backward kernel 7, derived from the softmax Jacobian."""
    return check("e3_kernel7_from_jacobian", source, block_size=block_size, **kw)


def check_tune_kernel8(source, *, block_size=256, t_per_block=4, **kw):
    """Exercise 4: kernel 8 with your BLOCK_SIZE and T_PER_BLOCK, timed against kernel 8 at
    its best block size on this GPU."""
    return check("e4_tune_kernel8", source, block_size=block_size, t_per_block=t_per_block, **kw)


def check_beat_kernel(source, *, block_size=256, t_per_block=1, beat=8, **kw):
    """Exercise 5: any softmax backward kernel; timed against kernel ``beat`` (6, 7 or 8) at
    its best block size on this GPU."""
    return check("e5_beat_kernel", source, block_size=block_size, t_per_block=t_per_block,
                 beat=beat, **kw)


def sweep_kernel8(source, *, block_sizes=(128, 256, 512, 1024), t_per_blocks=(1, 2, 4, 8),
                  timeout=None, quiet=False, use_solution=None):
    """Time exercise 4's kernel for every (block_size, t_per_block); return {(bs, tpb): ms}.

    Each variant is first checked at the small shape (a wrong one is shown as 'wrong',
    not timed), then timed at B=4 T=1024 C=768 NH=12, interleaved with kernel 8 at its best
    block size on this GPU. Compiling many variants takes a while the first time (they are
    cached).
    """
    ex = EXERCISES["e4_tune_kernel8"]
    source, _, filename, substituted = resolve(ex, source, {}, use_solution)
    configs = [(bs, tpb) for bs in block_sizes for tpb in t_per_blocks]
    if not configs:
        raise InputError("sweep_kernel8 needs at least one block size and one t_per_block")
    attempt = Attempt(ex, source, filename, None if substituted else cell_line_offset(source),
                      substituted, sanitize=False, quiet=True,
                      timeout=timeout or 60 + 10 * len(configs))
    for bs, tpb in configs:
        cfg, defines = configure(ex, dict(block_size=bs, t_per_block=tpb))
        if not attempt.cases:
            problem = compile_check(ex, source, filename, defines, attempt.offset)
            if problem:
                attempt.finish(problem[0], indent(problem[1]))
            attempt.cases = make_cases(ex, cfg, timing=True)
        launches = [student_launch(ex, cfg, c.shape) for c in attempt.cases]
        attempt.variants.append(dict(label=variant_label(cfg), defines=defines,
                                     grids=[g for g, _ in launches],
                                     blocks=[b for _, b in launches]))
    job = make_job(ex, source, filename, attempt.cases, attempt.variants, runs=1, timing=True,
                   stop_on_failure=False)
    with job_directory() as jobdir:
        attempt.outcome = run_job(job, attempt.timeout, jobdir)
        res = attempt.outcome.result
        if attempt.outcome.timed_out or res.get("error") or not res.get("variants"):
            # explain with a normal check of the first variant (it raises)
            judge(replace(attempt, variants=attempt.variants[:1]))
        table, runs = _sweep_results(attempt, configs)
    lines = _sweep_lines(attempt, block_sizes, t_per_blocks, table, runs, job["repeats"])
    if not quiet:
        print("\n".join(lines), flush=True)
    return table


def _sweep_results(attempt, configs):
    """({(bs, tpb): median ms or None}, {(bs, tpb): the timing case's report}); a variant
    that does not compile ends the sweep with the compile error."""
    table, runs = {}, {}
    for config, v in zip(configs, attempt.outcome.result["variants"]):
        if v.get("compile_error"):
            attempt.finish("compile", indent(format_compile_error(
                v["compile_error"], attempt.source, attempt.filename, attempt.offset)))
        r1 = v["cases"][1] if len(v["cases"]) > 1 else {}
        table[config] = r1.get("time_ms")
        if "times" in r1:
            runs[config] = r1
    return table, runs


def _sweep_lines(attempt, block_sizes, t_per_blocks, table, runs, repeats):
    """The sweep's table, the reference and the fastest variant against it."""
    small, big = attempt.cases[0].label, attempt.cases[1].label
    width = max(8, max(len(str(t)) for t in t_per_blocks) + 2)
    lines = [f"kernel 8 sweep at {big}: median ms of {repeats}, each variant interleaved with "
             f"the reference (L2 flushed); 'wrong' = a wrong result (checked at {small} and at "
             f"this shape), not timed",
             f"{'block_size':>10} | " + " ".join(f"{f'tpb={t}':>{width}}" for t in t_per_blocks)]
    for bs in block_sizes:
        cells = [f"{ms:>{width}.4f}" if ms is not None else f"{'wrong':>{width}}"
                 for ms in (table.get((bs, tpb)) for tpb in t_per_blocks)]
        lines.append(f"{bs:>10} | " + " ".join(cells))
    if not runs:
        return lines + ["no variant computed the right result: run check_tune_kernel8 on one of "
                        "them to see why"]
    (bs, tpb), r1 = min(runs.items(), key=lambda kv: kv[1]["time_ms"])
    t = timings(r1["times"])
    yours = t["yours"]
    if "reference" not in t:
        return lines + [f"fastest: block_size={bs}, t_per_block={tpb}: {yours.median_ms:.4f} ms"]
    ref = t["reference"]
    q1, q3 = ref.quartiles_ms
    lines.append(f"reference ({r1['reference_label']}; 4 rows per block): {ref.median_ms:.4f} ms "
                 f"(IQR {q1:.4f}-{q3:.4f}, in the fastest variant's run)")
    v = verdict(yours, ref)
    y1, y3 = yours.quartiles_ms
    against = (f"not resolved against the reference (IQR {y1:.4f}-{y3:.4f} against {q1:.4f}-{q3:.4f})"
               if v == "not resolved" else f"{v} than the reference")
    lines.append(f"fastest: block_size={bs}, t_per_block={tpb}: {yours.median_ms:.4f} ms, "
                 f"{against}")
    return lines
