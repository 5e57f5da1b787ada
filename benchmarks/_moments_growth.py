"""Part (b) of moments.py: full against diagonal moment propagation as J grows.

An untrained `BayesianTransformerBlock` on a random batch [B, J, width];
`part_b` times `tfp_bnn.moments.transformer_block` in each mode and reads
the TensorFlow CPU allocator's peak during one call, `print_b` prints the
table and the growth exponents. The protocol is in the docstring of
moments.py.
"""

import numpy as np
import tensorflow as tf

import _timing
from _moments_speed import FF_DIM
from _moments_speed import HEADS
from _moments_speed import WIDTH
from _moments_speed import ms
from tfp_bnn import moments
from tfp_bnn.layers.attention.bayesian_transformer_block import BayesianTransformerBlock


def _slope(xs, ys):
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def _peak_bytes(function, x):
    """TF CPU allocator peak during one call, minus what was allocated before."""
    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        function(x).numpy()
        peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    except (ValueError, RuntimeError, tf.errors.OpError):
        return None
    return max(peak - before, 0) if peak > 0 else None


def _block_pass(params, key_dim, mode, jit):
    """The compiled block pass x -> output mean, in `mode`."""

    def forward(x):
        return moments.transformer_block(x, params, HEADS, key_dim, mode=mode,
                                         max_bytes=2**33).mean

    return tf.function(forward, jit_compile=jit)


def part_b(args, log):
    """Times both modes at every J; returns ({J: row}, the variants in order)."""
    rows = {}
    variants = []
    for seq_len in args.lengths:
        block = BayesianTransformerBlock(num_heads=HEADS, ff_dim=FF_DIM, seed=args.seed)
        shape = (args.batch, seq_len, WIDTH)
        block.build(shape)
        params = block.moment_parameters()
        x = tf.random.stateless_normal(shape, seed=[args.seed, seq_len])
        key_dim = block.attention.key_dim
        row = {"x": x, "bytes": moments.full_covariance_bytes(
            args.batch, seq_len, WIDTH, HEADS, key_dim, key_dim, FF_DIM)}
        for mode in ("full", "diagonal"):
            function = _block_pass(params, key_dim, mode, jit=not args.no_xla)
            variant = _timing.timed(f"J={seq_len} {mode} [{jit_label(args)}]",
                                    lambda f=function, x=x: f(x).numpy(),
                                    calls=1 if mode == "full" else 10)
            row[mode] = (function, variant)
            variants.append(variant)
        rows[seq_len] = row
    for variant in variants:
        log(f"  warming up {variant.name} ...")
        variant.warm_up(1)
        if not variant.ok:
            raise RuntimeError(f"{variant.name} failed: {variant.error}")
    log(f"timing full and diagonal modes, {args.rounds} interleaved rounds ...")
    _timing.run_round_robin(variants, args.rounds, 3, log=log)
    for row in rows.values():
        for mode in ("full", "diagonal"):
            function, variant = row[mode]
            row[f"{mode}_peak"] = _peak_bytes(function, row["x"]) if variant.ok else None
    return rows, variants


def jit_label(args):
    """The compilation of part (b)'s passes, as the table labels it."""
    return "jit off" if args.no_xla else "XLA"


def _mb(value):
    if value is None:
        return "n/a"
    return "<0.01" if value < 0.005 * 2**20 else f"{value / 2**20:.2f}"


def print_b(args, rows, variants):
    """Prints part (b); returns (its Markdown table, the growth lines)."""
    print()
    print(_timing.format_table(
        f"(b) one block pass, B = {args.batch}, width {WIDTH}, {HEADS} heads, ff {FF_DIM}, "
        f"{jit_label(args)}; median per pass", variants))
    print()
    lines = ["| J | full ms | diagonal ms | full/diagonal | largest covariance MB (analytic) "
             "| full peak MB (TF allocator) | diagonal peak MB |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    lengths, full_ms, peaks = [], [], []
    for seq_len, row in rows.items():
        full, diag = row["full"][1], row["diagonal"][1]
        if not (full.ok and diag.ok):
            lines.append(f"| {seq_len} | {full.error or ''} {diag.error or ''} |")
            continue
        lengths.append(seq_len)
        full_ms.append(ms(full))
        peaks.append(row["full_peak"])
        lines.append(f"| {seq_len} | {ms(full):.2f} | {ms(diag):.2f} | "
                     f"{full.median() / diag.median():.1f} | {row['bytes'] / 2**20:.2f} | "
                     f"{_mb(row['full_peak'])} | {_mb(row['diagonal_peak'])} |")
    table = "\n".join(lines)
    print(table)
    growth = []
    if len(lengths) >= 2:
        growth.append(f"full-mode time grows as J^{_slope(lengths, full_ms):.2f} "
                      f"(log-log slope over J = {', '.join(map(str, lengths))}); between the "
                      f"last two J: J^{_slope(lengths[-2:], full_ms[-2:]):.2f}")
        measured = [(j, p) for j, p in zip(lengths, peaks) if p]
        if any(p is None for p in peaks):
            growth.append("peak memory not measurable here (TF allocator stats "
                          "unavailable): analytic bytes only")
        elif len(measured) >= 2:
            js, ps = zip(*measured)
            growth.append(f"full-mode peak memory grows as J^{_slope(js, ps):.2f} "
                          f"(over J = {', '.join(map(str, js))}; last two J: "
                          f"J^{_slope(js[-2:], ps[-2:]):.2f}); the largest covariance, "
                          "B*H*J^4 floats, grows as J^4 once it dominates")
        else:
            growth.append("full-mode peak memory too small to measure at these J")
    for line in growth:
        print(line)
    return table, growth
