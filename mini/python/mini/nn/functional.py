"""mini.nn.functional: the stateless layer functions, as in torch.nn.functional.

Each one delegates to one eager C++ op of `mini` (linear to two: matmul, then add), so what
runs, and what the kernel counters in `mini.metrics` count, is exactly that op.
"""

import mini
from mini import _C


def linear(input, weight, bias=None):
    """input @ weight.t() + bias, with weight [out_features, in_features]. Where autocast ran
    the matmul in bfloat16, the bias is added in bfloat16 too, as torch's linear does.
    Eagerly on CUDA it is one cuBLASLt GEMM that adds the bias in its epilogue (torch's addmm
    does the same); a compiled graph records the matmul and the add, which fusion sees."""
    if not mini.compiler.is_compiling() and input.is_cuda:
        return _C.linear(input, weight, bias)
    output = mini.matmul(input, weight.t())
    if bias is not None:
        if output.dtype != input.dtype and output.dtype != bias.dtype:  # autocast's lower precision
            bias = bias.to(output.dtype)
        output = output + bias
    return output


def relu(input, inplace=False):
    if inplace:
        raise NotImplementedError(
            "relu(inplace=True): mini has no in-place relu_; use inplace=False"
        )
    return mini.relu(input)


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return mini.gelu(input, approximate=approximate)


def softmax(input, dim):
    return mini.softmax(input, dim)


def log_softmax(input, dim):
    return mini.log_softmax(input, dim)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return mini.layer_norm(input, tuple(normalized_shape), weight, bias, eps)


def mse_loss(input, target, reduction="mean"):
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(
            f"mse_loss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
        )
    return mini.mse_loss(input, target, reduction=reduction)


def dropout(input, p=0.5, training=True, inplace=False):
    """Each element zeroed with probability p (a fresh uniform draw per call), the others
    scaled by 1/(1-p), when training; `input` itself otherwise. In compiled code the draw is a
    random node of the graph (mini.manual_seed makes it repeatable)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if inplace:
        raise NotImplementedError("F.dropout(inplace=True) is not supported by mini: use inplace=False "
                                  "(the result is the same tensor values)")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    keep = mini.rand(*input.shape, device=input.device, dtype=input.dtype) >= p
    return input * keep * (1.0 / (1.0 - p))


def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    """The negative log-likelihood of each row's target class under log_softmax(input): input
    [N, C] (or [C]) logits, target [N] (or []) int64 class indices. Rows whose target is
    ignore_index count for nothing (and "mean" divides by the rows that count). Written as
    logsumexp(x) - x[t] with a one-hot select inside mini.compile (Inductor decomposes it into
    log_softmax and a gather), so that fusion sees it; eagerly one fused kernel (and one for its backward). A target outside [0, C) that is not ignore_index gives a NaN loss for
    its row (torch raises; a compiled graph cannot)."""
    if weight is not None or label_smoothing:
        raise NotImplementedError("F.cross_entropy: weight= and label_smoothing= are not supported by mini yet")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if target.dtype != mini.int64:
        raise TypeError(f"F.cross_entropy: target must hold int64 class indices, got {target.dtype} "
                        "(use target.long())")
    if input.dim() not in (1, 2) or target.dim() != input.dim() - 1:
        raise ValueError(f"F.cross_entropy takes input [N, C] with target [N] (or [C] with []), got input "
                         f"{list(input.shape)} and target {list(target.shape)}; reshape to that first, "
                         "e.g. logits.view(-1, logits.size(-1)) and targets.view(-1)")
    if not mini.compiler.is_compiling():
        # eagerly: one kernel a row for the loss, one more for its gradient (nn_kernels.cpp)
        rows, tgt = (input, target) if input.dim() == 2 else (input.unsqueeze(0), target.unsqueeze(0))
        nll = _C.cross_entropy_nll(rows, tgt, ignore_index)
        nll = nll if input.dim() == 2 else nll.squeeze(0)
    else:  # in a graph: ops that fusion sees
        nll = _cross_entropy_ops(input, target, ignore_index)
    if reduction == "none":
        return nll
    if reduction == "sum":
        return nll.sum()
    return (nll.sum() / (target != ignore_index).float().sum()).to(nll.dtype)  # bfloat16 logits: a bfloat16 loss


def _cross_entropy_ops(input, target, ignore_index):
    # -log_softmax(x)[t] = logsumexp(x) - x[t]. The row's max, its sum of exp and the pick of
    # x[t] (a sum of a one-hot select) are all reductions over the row, which fusion puts in one
    # kernel: one pass over the logits. The backward reads the logits and the rows' max and sum
    # of exp (N values each), one more pass. Through log_softmax the pick needs the logsumexp first: a second
    # pass forward, and the backward computed log_softmax again (two more).
    dtype = input[..., :1].log_softmax(-1).dtype  # log_softmax's (float32 under autocast); the graph drops the call
    classes = mini.arange(input.shape[-1], device=input.device)
    hit = target.unsqueeze(-1) == classes
    # x's readers stay close together: the partitioner then rebuilds x (and exp) in the backward
    # from the logits rather than save the float32 copy (values read far apart are saved)
    x = input.float() if input.dtype == mini.bfloat16 else input  # the row's math in float32, as log_softmax's
    picked = mini.where(hit, x, 0.0).sum(-1)
    shift = x.detach().amax(-1, keepdim=True)  # any per-row constant: no gradient flows through it
    lse = (x - shift).exp().sum(-1).log() + shift.squeeze(-1)
    # a target in [0, C) hits exactly one class: checked on the [N] targets, not the [N, C] mask
    in_range = (target >= 0) & (target < input.shape[-1])
    ignored = target == ignore_index
    return mini.where(in_range, (lse - picked).to(dtype), float("nan")).masked_fill(ignored, 0.0)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(query @ key^T * scale + mask) @ value over the last two dims (torch's): query
    [..., L, E], key [..., S, E], value [..., S, Ev]; scale 1/sqrt(E) unless given; is_causal
    masks key j > query i (the top-left triangle, as torch's, for L != S too); attn_mask a bool
    mask (True: attend) or a float one added to the scores; dropout_p drops attention weights
    (always, as torch's function does: pass 0.0 in eval).

    Eagerly, without a mask or dropout, it runs one fused kernel (mini/tensor/attention.cpp: the
    [L, S] scores never reach memory), as torch's eager does. Inside mini.compile it is one
    Attention node of the graph, an extern call to the same kernel with its backward
    (FlashAttention-2 on CUDA; mini.config.fused_attention says where), as Inductor calls aten's
    flash attention. With a mask, dropout or operands the node does not take (broadcast batch
    dims, mixed dtypes, on CUDA head dims other than 64 and 128 under "auto"), it is written as the ops below, so that
    capture records them and fusion sees the softmax."""
    if enable_gqa:
        raise NotImplementedError("scaled_dot_product_attention(enable_gqa=True) is not supported by mini yet")
    if is_causal and attn_mask is not None:
        raise RuntimeError("scaled_dot_product_attention: an explicit attn_mask must not be set when is_causal=True")
    scale = query.size(-1) ** -0.5 if scale is None else scale
    if dropout_p == 0.0 and attn_mask is None:
        if not mini.compiler.is_compiling():
            if not _C.fused_attention_supports(query, key, value):  # '' where the kernel takes them
                return _C.fused_attention(query, key, value, bool(is_causal), float(scale))
        else:  # one Attention node (an extern call, FlashAttention on CUDA), or None: decomposed below
            out = mini._functional.attention_node(query, key, value, bool(is_causal), float(scale))
            if out is not None:
                return out
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        future = mini.ones(query.size(-2), key.size(-2), dtype=mini.bool, device=query.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    elif attn_mask is not None:
        if attn_mask.dtype == mini.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = scores.softmax(-1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value


def embedding(input, weight, padding_idx=None, max_norm=None, scale_grad_by_freq=False, sparse=False):
    """weight[input] (mini._functional.embedding): a token's vector by its index. padding_idx,
    max_norm, scale_grad_by_freq and sparse are not supported (they raise)."""
    if padding_idx is not None or max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("F.embedding: padding_idx, max_norm, scale_grad_by_freq and sparse are not "
                                  "supported by mini yet")
    return mini._functional.embedding(input, weight)
