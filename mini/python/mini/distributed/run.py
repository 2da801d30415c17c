"""python -m mini.distributed.run: torchrun's launcher, for mini.

    python -m mini.distributed.run --nproc-per-node 4 train.py --lr 0.1
    python -m mini.distributed.run --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 \\
        --master-port 29500 --nproc-per-node 8 train.py        # on each node, its --node-rank

Starts --nproc-per-node copies of the script (or of `-m module`), each with torchrun's
variables: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and
MASTER_PORT (on one node a free port unless --master-port names one). Where this machine has a
GPU for each process, each also gets its own through CUDA_VISIBLE_DEVICES: mini uses cuda:0 in
every process. Every line a process prints comes out prefixed with its rank ("[rank1]: ...").
When one process fails, the launcher stops the others and exits with its exit code, naming it;
Ctrl-C stops them all. Scripts started by torchrun itself run unchanged: only the variables
matter. torchrun's spellings of the flags (--nproc_per_node, ...) work too.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m mini.distributed.run", allow_abbrev=False,
                                description="Starts the processes of a mini.distributed job.")
    p.add_argument("--nproc-per-node", "--nproc_per_node", default="1",
                   help="processes on this node: a number, or gpu / cpu / auto (default 1)")
    p.add_argument("--nnodes", default="1", help="nodes in the job (default 1)")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0,
                   help="this node's rank, 0 to nnodes-1 (default 0)")
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1",
                   help="the address of node 0, where rank 0 hosts the store (default 127.0.0.1)")
    p.add_argument("--master-port", "--master_port", type=int, default=None,
                   help="the store's port (default: a free port; required with several nodes)")
    p.add_argument("--standalone", action="store_true", help="one node, a free port (torchrun's)")
    p.add_argument("-m", "--module", action="store_true",
                   help="run the script argument as a module, as python -m does")
    p.add_argument("training_script", help="the script (or, with -m, the module) to run")
    p.add_argument("training_script_args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if not args.nnodes.isdigit() or int(args.nnodes) < 1:
        p.error(f"--nnodes {args.nnodes}: a number of nodes (mini has no elastic min:max ranges)")
    args.nnodes = int(args.nnodes)
    args.nproc_per_node = processes_per_node(p, args.nproc_per_node)
    if not 0 <= args.node_rank < args.nnodes:
        p.error(f"--node-rank {args.node_rank} is not a node of --nnodes {args.nnodes}")
    if args.nnodes > 1 and args.master_port is None:
        p.error("--master-port is required with --nnodes > 1: every node must name the same port")
    if args.master_port is None:
        args.master_port = free_port()
    return args


def gpu_count():
    """GPUs this machine has, without starting CUDA in the launcher."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def processes_per_node(parser, text):
    if text.isdigit() and int(text) > 0:
        return int(text)
    if text in ("gpu", "cpu", "auto"):
        gpus = gpu_count()
        if text == "gpu" and gpus == 0:
            parser.error("--nproc-per-node gpu: this machine has no GPU")
        return gpus if text == "gpu" or (text == "auto" and gpus) else os.cpu_count()
    parser.error(f"--nproc-per-node {text}: a positive number, or gpu / cpu / auto")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def child_env(args, local_rank):
    env = dict(os.environ)
    env.update(
        RANK=str(args.node_rank * args.nproc_per_node + local_rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(args.nnodes * args.nproc_per_node),
        LOCAL_WORLD_SIZE=str(args.nproc_per_node),
        GROUP_RANK=str(args.node_rank),
        MASTER_ADDR=args.master_addr,
        MASTER_PORT=str(args.master_port),
        PYTHONUNBUFFERED="1",  # lines reach the prefixing reader as they are printed
    )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = [g for g in visible.split(",") if g] if visible is not None else \
        [str(i) for i in range(gpu_count())]
    if args.nproc_per_node > 1 and len(gpus) >= args.nproc_per_node:
        env["CUDA_VISIBLE_DEVICES"] = gpus[local_rank]
    return env


def forward(stream, prefix, out, lock):
    """Copies `stream` to `out` line by line, each line prefixed."""
    for line in iter(stream.readline, b""):
        with lock:
            out.write(prefix + line)
            out.flush()
    stream.close()


def start(args):
    command = [sys.executable, "-u"] + (["-m"] if args.module else []) + \
        [args.training_script] + args.training_script_args
    lock, procs, threads = threading.Lock(), [], []
    for local_rank in range(args.nproc_per_node):
        env = child_env(args, local_rank)
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        prefix = f"[rank{env['RANK']}]: ".encode()
        for stream, out in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
            t = threading.Thread(target=forward, args=(stream, prefix, out, lock), daemon=True)
            t.start()
            threads.append(t)
        procs.append((int(env["RANK"]), proc))
    return procs, threads


def stop(procs, grace=5.0):
    """SIGTERM to every process still running, SIGKILL to those alive after `grace` seconds."""
    for _, proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for _, proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def describe_exit(code):
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def supervise(procs):
    """Waits for every process; the first one that fails stops the others. Its (rank, code), or None."""
    while True:
        running = False
        for rank, proc in procs:
            code = proc.poll()
            if code is None:
                running = True
            elif code != 0:
                stop(procs)
                return rank, code
        if not running:
            return None
        time.sleep(0.05)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    procs, threads = start(args)
    try:
        failure = supervise(procs)
    except KeyboardInterrupt:
        stop(procs)
        failure = ("all", 130)
    for t in threads:
        t.join(timeout=2.0)
    if failure is None:
        return 0
    rank, code = failure
    if rank == "all":
        print("mini.distributed.run: interrupted; stopped every rank", file=sys.stderr)
        return code
    pid = dict(procs)[rank].pid
    print(f"mini.distributed.run: rank {rank} (pid {pid}) {describe_exit(code)}; stopped the "
          f"other ranks. Its own output, prefixed [rank{rank}], says why", file=sys.stderr)
    return code if code > 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
