"""Runs every lab, one subprocess each, and says which passed.

    PYTHONPATH=build/python .venv/bin/python labs/run_all.py [--quick] [--out DIR] [--device cpu]
        [--skip LAB[,LAB...]]

The flags but --skip are passed through to every lab. Exits non-zero if any lab failed.
A new lab is one more line in LABS.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

LABS = [
    "eager_anatomy.py",
    "anatomy.py",
    "graph_breaks.py",
    "shape_thrash.py",
    "scalar_guards.py",
    "cache_storm.py",
    "regional_compile.py",
    "fusion_wins.py",
    "reduction_layouts.py",
    "train_gpt.py",
    "reduce_overhead.py",
    "ddp_overlap.py",
    "article_figures.py",
]

LABS_DIR = Path(__file__).resolve().parent
REPO_ROOT = LABS_DIR.parent


def parse_args(argv):
    parser = argparse.ArgumentParser(description="Run every lab in labs/.")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "figures",
                        help="folder for the figures and JSON files (default: figures/)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a fast check")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--skip", default="", help="comma-separated labs not to run (e.g. train_gpt.py)")
    args = parser.parse_args(argv)
    unknown = [lab for lab in args.skip.split(",") if lab and lab not in LABS]
    if unknown:
        parser.error(f"--skip: unknown lab(s) {', '.join(unknown)}; the labs are {', '.join(LABS)}")
    return args


def run_lab(lab, args, index, count):
    command = [sys.executable, str(LABS_DIR / lab), "--out", str(args.out),
               "--device", args.device]
    if args.quick:
        command.append("--quick")
    print(f"\n=== [{index}/{count}] {lab} ===", flush=True)
    start = time.perf_counter()
    returncode = subprocess.run(command).returncode
    seconds = time.perf_counter() - start
    status = "ok" if returncode == 0 else f"FAILED (exit {returncode})"
    print(f"=== [{index}/{count}] {lab}: {status} in {seconds:.1f} s ===", flush=True)
    return {"lab": lab, "ok": returncode == 0, "status": status, "seconds": seconds}


def print_summary(results, out_dir):
    width = max(len(result["lab"]) for result in results)
    print("\nsummary")
    for result in results:
        print(f"  {result['lab']:<{width}}  {result['status']:<20}{result['seconds']:>7.1f} s")
    failed = sum(not result["ok"] for result in results)
    print(f"{len(results) - failed} of {len(results)} labs passed; outputs in {out_dir}")


def main(argv=None):
    args = parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    labs = [lab for lab in LABS if lab not in args.skip.split(",")]
    results = [run_lab(lab, args, index, len(labs)) for index, lab in enumerate(labs, 1)]
    print_summary(results, args.out)
    return 0 if all(result["ok"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
