"""The Inductor anchor workloads, written with mini ops as ../shared/anchors/torch_gpu_anchor.py
writes them with torch ops: transform, chain8, softmax_decomp, layernorm_decomp, ffn_out.

One definition, shared by labs/fusion_wins.py, labs/bench/bench_inductor.py and
tests/python/test_inductor.py. This file is not a lab: labs/run_all.py does not run it.
"""

import mini


def transform(x, bias):
    x = x + bias
    x = x * 0.5
    x = mini.relu(x)
    return x


def chain8(x, y):
    t = x.sin() * y
    t = t.cos() + x
    t = t * 0.5 - y
    t = mini.sigmoid(t) * x
    return t


def softmax_decomp(x):
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def layernorm_decomp(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * mini.rsqrt(var + 1e-5) * w + b


def ffn_out(x, w, b):
    return mini.relu(x @ w + b)
