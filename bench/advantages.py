"""Benchmark: vectorised advantage estimators vs the plain-loop references, side by side.

    .venv/bin/python bench/advantages.py [--rows N] [--loop-rows M] [--repeats K]

Input: a pandas DataFrame with string ids, its rows shuffled (groups of 8 episodes of 4..12
steps, mean 8; each group has its own pool of 20 anchor states, 16-hex keys, so anchors recur
within a group). The timed call is ``compute(name, df, ...)``: validation, factorising the
string ids, sorting and scattering back are all included. Times are the median of K runs.

The floor, measured in the same run on the same table: what any group-relative estimator must do
at least, factorise the episode ids (strings), sort the rows by (episode, step) and reduce one
segment sum per episode. Each estimator is timed twice: on the string ids as they come
("× floor"), and on the table as the stages that estimate read it ("read"): written to Parquet
(`creditline.store.write_parquet_atomic`) and read back with its ids as categoricals straight from
the file's dictionary pages (`read_parquet(path, ID_COLUMNS)`), so no estimator hashes them. "read
× floor" is against the floor above; "read × floor₂" against the floor on the same file read with
string ids, whose strings Arrow makes anew in row order (hashing them then touches memory in order,
not 1M objects scattered by the shuffle), the stricter of the two.

The loops (tests/advantages/reference_loops.py: dicts and Python loops, the reference code's
structure, O(S·H)) run on the first M rows (whole groups); "loop @N" extrapolates their
per-row time linearly to N rows; verl-agent's own discounted-return loop is O(S²), so the real
reference is slower still. Peak memory: a fresh subprocess builds the table, resets the
kernel's peak-RSS counter (/proc/self/clear_refs), runs the estimator once, and reports
VmHWM after − VmRSS before.

Targets (2 cores, 1M rows): gigpo ≤ 1.0 s, hgpo (H=2) ≤ 2.0 s, ≤ 1 GiB extra memory; on the table as
the stages read it (ids categorical end to end), every estimator ≤ 1.5× the floor.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "advantages")]

from adv_tables import bench_steps  # noqa: E402
from reference_loops import LOOPS, discounted_returns_loop  # noqa: E402

from creditline.credit.advantages import compute, discounted_returns  # noqa: E402
from creditline.credit.advantages.registry import resolve  # noqa: E402
from creditline.credit.round_advantages import ID_COLUMNS  # noqa: E402
from creditline.store import read_parquet, write_parquet_atomic  # noqa: E402

# (label, estimator, params, target seconds at 1M rows or None)
CASES = [
    ("gigpo mean_std_norm γ=.95", "gigpo", {"mode": "mean_std_norm", "gamma": 0.95}, 1.0),
    ("hgpo H=2 γ=.95", "hgpo", {"history_length": 2, "gamma": 0.95}, 2.0),
    ("grpo", "grpo", {}, None),
    ("reinforce_pp_baseline", "reinforce_pp_baseline", {}, None),
    ("turn_group a2tgpo", "turn_group", {}, None),
    ("discounted_returns γ=.95", "discounted_returns", {"gamma": 0.95}, None),
]
MEMORY_TARGET_MIB = 1024.0


def run_vectorised(name, df, params):
    if name == "discounted_returns":
        return discounted_returns(df, params["gamma"])
    return compute(name, df, **params)


def run_loop(name, df, params):
    if name == "discounted_returns":
        return discounted_returns_loop(df, params["gamma"])
    _, full, conv = resolve(name, params)
    return LOOPS[name](df, conv, **full)


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def floor(df):
    """Factorise the episode ids, sort by (episode, step), one segment sum per episode."""
    codes, _ = pd.factorize(df["episode_id"])
    step = df["step_idx"].to_numpy()
    order = np.argsort(codes * (int(step.max()) + 1) + step, kind="stable")
    episode = codes[order]
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    return np.add.reduceat(df["step_reward"].to_numpy()[order], starts)


def parquet_round_trip(df, *readings):
    """[(table, seconds to read it)] per reading: the table written to Parquet once and read back as the
    stages read it (`creditline.store.read_parquet`), each reading naming the columns read as categoricals,
    the same rows and values. A string column comes back with its strings made anew in row order (equal ones
    shared), where the shuffled table's lie scattered in memory."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "steps.parquet"
        write_parquet_atomic(df, path)
        read = []
        for categories in readings:
            t0 = time.perf_counter()
            table = read_parquet(path, categories)
            read.append((table, time.perf_counter() - t0))
        return read


def whole_groups_prefix(df, n_rows):
    """The first ~n_rows rows, cut at a group boundary, sorted as the loops expect."""
    cut = df.group_id.iloc[min(n_rows, len(df)) - 1]
    end = int((df.group_id == cut).to_numpy().nonzero()[0].max()) + 1
    return df.iloc[:end].sort_values(["episode_id", "step_idx"], kind="stable").reset_index(drop=True)


def status_kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def memory_child(name, rows):
    """Run in a subprocess: print {"peak_delta_mib", "reset"} for one call on a fresh table."""
    params = next(p for _, n, p, _ in CASES if n == name)
    df = bench_steps(rows)
    gc.collect()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        reset = True
    except OSError:
        reset = False
    before = status_kib("VmRSS")
    run_vectorised(name, df, params)
    print(json.dumps({"peak_delta_mib": (status_kib("VmHWM") - before) / 1024, "reset": reset}))


def measure_memory(name, rows):
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", name, "--rows", str(rows)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _mib(mem):
    if mem is None:
        return ""
    return format(mem["peak_delta_mib"], ".0f") + ("" if mem["reset"] else "†")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--loop-rows", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        return memory_child(args.memory_child, args.rows)

    ordered = bench_steps(args.rows)
    small = whole_groups_prefix(ordered, args.loop_rows)
    df = ordered.sample(frac=1.0, random_state=0).reset_index(drop=True)  # rows in no particular order
    n, m = len(df), len(small)
    print(
        f"step table: {n:,} shuffled rows, {df.episode_id.nunique():,} episodes, {df.group_id.nunique():,} groups, "
        f"{df.anchor_key.nunique():,} distinct anchors; loops on {m:,} rows; median of {args.repeats} runs"
    )
    t_floor = timed(partial(floor, df), args.repeats)
    (read_strings, t_read_strings), (read_back, t_read_categories) = parquet_round_trip(df, (), ID_COLUMNS)
    t_floor_read = timed(partial(floor, read_strings), args.repeats)
    del read_strings
    print(f"floor (factorise episode ids, sort, segment sums): {t_floor:.3f}s; "
          f"floor₂, on the table read back from Parquet with string ids: {t_floor_read:.3f}s; "
          f"reading that file: {t_read_strings:.3f}s with string ids, "
          f"{t_read_categories:.3f}s with the ids as categoricals")  # fmt: skip
    header = (
        f"{'estimator':<26} {'vec @' + format(n, ','):>13} {'target':>10} {'× floor':>8} "
        f"{'read @' + format(n, ','):>14} {'read × floor':>13} {'read × floor₂':>14} "
        f"{'vec @' + format(m, ','):>12} {'loop @' + format(m, ','):>13} {'loop/vec':>9} "
        f"{'loop @' + format(n, ',') + '*':>15} {'ratio @' + format(n, ','):>15} {'peak MiB':>9}"
    )
    print(header)
    print("-" * len(header))
    for label, name, params, target in CASES:
        t_vec = timed(partial(run_vectorised, name, df, params), args.repeats)
        t_read = timed(partial(run_vectorised, name, read_back, params), args.repeats)
        t_vec_small = timed(partial(run_vectorised, name, small, params), args.repeats)
        t_loop = timed(partial(run_loop, name, small, params), 1)
        loop_full = t_loop / m * n
        mem = measure_memory(name, args.rows) if target is not None else None
        ok = "" if target is None else ("ok" if t_vec <= target else "MISS")
        print(
            f"{label:<26} {t_vec:>12.3f}s {(f'{target:.1f}s ' + ok) if target else '':>10} "
            f"{t_vec / t_floor:>7.2f}x {t_read:>13.3f}s {t_read / t_floor:>12.2f}x {t_read / t_floor_read:>13.2f}x "
            f"{t_vec_small:>11.4f}s "
            f"{t_loop:>12.3f}s {t_loop / t_vec_small:>8.0f}x {loop_full:>14.1f}s {loop_full / t_vec:>14.0f}x "
            f"{_mib(mem):>9}"
        )
    print(
        f"* loop time per row on {m:,} rows × {n:,} rows (linear extrapolation). "
        f"Peak MiB = VmHWM − VmRSS around one call in a fresh process (target ≤ {MEMORY_TARGET_MIB:.0f}; † = the peak counter could not be reset, so the "
        "table build's own peak may hide the call's)."
    )


if __name__ == "__main__":
    main()
