"""mini.compiler: the functions of torch.compiler that model code calls."""


def is_compiling():
    """True while mini.compile captures the code that calls it, False when that code runs
    eagerly (torch.compiler.is_compiling). Code may branch on it: capture sees True and records
    the branch taken under it, so the two paths must compute the same values.
    F.scaled_dot_product_attention does: eagerly it runs one fused kernel, captured it is
    written as the matmuls and the softmax that fusion works on."""
    return False


is_dynamo_compiling = is_compiling
