"""A GPT model file written for torch's API (labs/gpt.py, only its
imports naming mini) trained eager and compiled, and sampled (issue 15).

    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python/test_gpt_torch_style.py
"""
import sys
from pathlib import Path

import numpy as np
import pytest

import mini
from conftest import CUDA_SKIP_REASON, HAS_CUDA, to_np
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "labs"))
from gpt import GPT, Config  # noqa: E402


def batch(seed, config, b=4):
    rng = np.random.default_rng(seed)
    idx = mini.tensor(rng.integers(0, config.vocab_size, size=(b, config.block_size)).tolist())
    return idx, mini.tensor(rng.integers(0, config.vocab_size, size=(b, config.block_size)).tolist())


@pytest.mark.parametrize("flash", [True, False])
def test_the_model_compiles_in_one_graph_with_eager_loss_and_gradients(flash):
    mini.manual_seed(0)
    config = Config()
    model = GPT(config)
    for block in model.transformer.h:
        if not flash:  # the masked-softmax path, as the file takes without scaled_dot_product_attention
            block.attn.flash = False
            block.attn.register_buffer("bias", mini.tril(mini.ones(config.block_size, config.block_size))
                                       .view(1, 1, config.block_size, config.block_size))
    assert model.transformer.wte.weight is model.lm_head.weight  # tied
    idx, targets = batch(1, config)
    explained = mini.explain(model)(idx, targets)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, str(explained)
    results = []
    for fn in (model, mini.compile(model)):
        model.zero_grad()
        logits, loss = fn(idx, targets)
        loss.backward()
        results.append((float(loss.item()), {n: to_np(p.grad) for n, p in model.named_parameters()}))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5)
    assert abs(results[0][0] - np.log(config.vocab_size)) < 0.5  # small init: about uniform
    for n, g in results[0][1].items():
        np.testing.assert_allclose(results[1][1][n], g, rtol=1e-4, atol=1e-6, err_msg=n)


def test_compiled_training_lowers_the_loss_as_eager_does_and_samples():
    config = Config()
    losses = {}
    for mode in ("eager", "compiled"):
        mini.manual_seed(0)
        model = GPT(config)
        opt = model.configure_optimizers(weight_decay=0.1, learning_rate=3e-3, betas=(0.9, 0.95))
        step = model if mode == "eager" else mini.compile(model)
        idx, _ = batch(2, config)
        targets = idx  # learnable: each position's own token, which causal attention sees
        losses[mode] = []
        for _ in range(12):
            _, loss = step(idx, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses[mode].append(float(loss.item()))
    np.testing.assert_allclose(losses["compiled"], losses["eager"], rtol=2e-3)
    assert losses["eager"][-1] < losses["eager"][0] - 0.5
    mini.manual_seed(5)
    out = model.generate(idx[:1, :5], 8, temperature=0.8, top_k=10)
    assert tuple(out.shape) == (1, 13) and out.dtype == mini.int64
    np.testing.assert_array_equal(to_np(out[:, :5]), to_np(idx[:1, :5]))
    assert ((to_np(out) >= 0) & (to_np(out) < config.vocab_size)).all()


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason=CUDA_SKIP_REASON)
def test_the_model_trains_on_cuda_eager_and_compiled_as_on_the_cpu():
    config = Config()
    losses = {}
    for device, mode in (("cpu", "eager"), ("cuda", "eager"), ("cuda", "compiled")):
        mini.manual_seed(0)
        model = GPT(config).to(device)
        opt = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-3, betas=(0.9, 0.95))
        step = model if mode == "eager" else mini.compile(model)
        idx, targets = (t.to(device) for t in batch(3, config))
        losses[device, mode] = []
        for _ in range(4):
            _, loss = step(idx, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses[device, mode].append(float(loss.item()))
    np.testing.assert_allclose(losses["cuda", "eager"], losses["cpu", "eager"], rtol=1e-4)
    np.testing.assert_allclose(losses["cuda", "compiled"], losses["cpu", "eager"], rtol=1e-4)
