"""Side-by-side summary of the conformance cases, for scripts/gpu_compare.sh: for each case,
what torch.compile 2.11 recorded (expected_torch_2.11.jsonl, expected_torch_2.11_mini.jsonl),
what real torch measured now on this interpreter (run_torch.py's output), and what mini did
(run_mini.py --json's output), with the fields that differ.

usage: python3 gpu_summary.py --recorded FILE [--recorded FILE ...] --torch FILE --mini FILE
                              [--required FILE]"""
import argparse
import json


def read_records(path):
    """JSON lines, optionally prefixed with '@' (run_torch.py writes '@@'); returns
    (header dict or None, {case: record})."""
    header, records = None, {}
    with open(path) as f:
        for line in f:
            line = line.strip().lstrip("@")
            if not line.startswith("{"):
                continue
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if "case" in d:
                records[d["case"]] = d
            elif header is None:
                header = d
    return header, records


def fields(r):
    """The scored fields of one record (as runner.score compares them)."""
    if r is None:
        return None
    e = r.get("explain") or {}
    return {
        "graphs": e.get("graphs"),
        "breaks": e.get("breaks"),
        "compiles": r.get("compiles_after_each_call"),
        "fullgraph": str(r.get("fullgraph", "missing")).split(":")[0],
        "eq_eager": not r.get("mismatch") and "error" not in r,
    }


def show(f):
    if f is None:
        return "-"
    g = "" if f["graphs"] is None else f"g{f['graphs']} b{f['breaks']} "
    return (f"{g}{f['compiles']} {f['fullgraph']}"
            + ("" if f["eq_eager"] else " NOT-EQ"))


def diff(a, b, has_explain):
    if a is None or b is None:
        return ["missing"]
    keys = ["compiles", "fullgraph", "eq_eager"] + (["graphs", "breaks"] if has_explain else [])
    return [k for k in keys if a[k] != b[k]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--recorded", action="append", required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--mini", required=True)
    ap.add_argument("--required")
    a = ap.parse_args()
    rec = {}
    for path in a.recorded:
        rec.update(read_records(path)[1])
    theader, live = read_records(a.torch)
    _, mini = read_records(a.mini)
    required = []
    if a.required:
        required = [l.split("#")[0].strip() for l in open(a.required)]
        # a case of cases_mini.py is listed as mini:NAME
        required = [l.split(":", 1)[-1] for l in required if l]

    print(f"live torch: {theader}")
    print("fields: g<graphs> b<breaks> [compiles after each call] fullgraph; "
          "NOT-EQ = outputs differ from eager or an error")
    w = max([len(n) for n in list(rec) + list(live)] + [4])
    print(f"{'case':{w}s}  {'recorded torch 2.11':30s}  {'live torch':30s}  {'mini':30s}  notes")
    n_same_torch = n_mini_ok = n_unrecorded = 0
    for name in list(dict.fromkeys(list(rec) + list(live))):
        r, t, m = fields(rec.get(name)), fields(live.get(name)), fields(mini.get(name))
        has_explain = "explain" in (live.get(name) or rec.get(name) or {})
        notes = []
        d_rec = diff(r, t, has_explain)
        if r is None:
            n_unrecorded += 1
            notes.append("not recorded yet")
        elif d_rec:
            notes.append("live torch != recorded: " + ",".join(d_rec))
        else:
            n_same_torch += 1
        d_mini = diff(t, m, has_explain)
        if d_mini:
            notes.append("mini != live torch: " + ",".join(d_mini))
        else:
            n_mini_ok += 1
        if name in required:
            notes.append("REQUIRED")
        err = (mini.get(name) or {}).get("error")
        if err:
            notes.append("mini error: " + err[:80])
        print(f"{name:{w}s}  {show(r):30s}  {show(t):30s}  {show(m):30s}  {'; '.join(notes)}")
    total = len(dict.fromkeys(list(rec) + list(live)))
    print(f"live torch matches the recorded numbers on {n_same_torch}/{total - n_unrecorded} "
          f"recorded cases ({n_unrecorded} not recorded yet)")
    print(f"mini matches live torch on {n_mini_ok}/{total} cases")
    if required:
        bad = [n for n in required if diff(fields(live.get(n)), fields(mini.get(n)),
                                            "explain" in (live.get(n) or {}))]
        print(f"required cases matching live torch: {len(required) - len(bad)}/{len(required)}"
              + (f" (differ: {' '.join(bad)})" if bad else ""))


if __name__ == "__main__":
    main()
