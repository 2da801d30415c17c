"""mini.optim: optimizers, torch-shaped, in plain Python over mini tensors.

An optimizer holds `param_groups`, a list of dicts each with 'params' (a list of tensors)
and the hyperparameters for them ('lr', ...). A learning-rate schedule edits them directly:

    opt = mini.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.param_groups[0]["lr"] = 0.01

`step()` updates every parameter in place under `mini.no_grad()`, from its `.grad`.
Per-parameter state (SGD's momentum buffer) lives in `self.state[param]`.
"""

import mini
from mini import _C


class Optimizer:
    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = {}
        self.param_groups = []
        params = list(params)
        if len(params) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(params[0], dict):
            params = [{"params": params}]
        for group in params:
            self.add_param_group(group)

    def add_param_group(self, group):
        """Adds a dict with 'params' (a tensor or an iterable of tensors); hyperparameters it
        leaves out are taken from the optimizer's defaults."""
        group = dict(group)
        params = group["params"]
        if isinstance(params, mini.Tensor):
            params = [params]
        group["params"] = list(params)
        for param in group["params"]:
            if not isinstance(param, mini.Tensor):
                raise TypeError(
                    f"optimizer can only optimize mini.Tensors, got {type(param).__name__}"
                )
            if not param.is_leaf:
                raise ValueError(
                    "can't optimize a non-leaf tensor; pass the module's parameters "
                    "(leaf tensors), e.g. model.parameters()"
                )
        for name, default in self.defaults.items():
            group.setdefault(name, default)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        """Clears every parameter's .grad: to None (the default), or to zeros in place."""
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if set_to_none:
                    param.grad = None
                else:
                    param.grad.zero_()

    def step(self):
        """Updates every parameter that has a gradient, in place, outside autograd."""
        with mini.no_grad():
            for group in self.param_groups:
                for param in group["params"]:
                    if param.grad is not None:
                        self._update(param, group)

    def _update(self, param, group):
        raise NotImplementedError(f"{type(self).__name__} does not define _update(param, group)")

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for index, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {index}")
            for name in sorted(group):
                if name != "params":
                    lines.append(f"    {name}: {group[name]}")
        lines.append(")")
        return "\n".join(lines)


class SGD(Optimizer):
    """Stochastic gradient descent, with optional momentum and weight decay, as torch's:

        g = grad + weight_decay * p
        buf = momentum * buf + (1 - dampening) * g       (buf = g on the first step)
        g = g + momentum * buf if nesterov else buf      (when momentum != 0)
        p = p - lr * g
    """

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, defaults)

    def _update(self, param, group):
        lr = float(group["lr"])
        momentum = group["momentum"]
        step_direction = param.grad
        if group["weight_decay"] != 0:
            step_direction = step_direction + param * group["weight_decay"]
        if momentum != 0:
            state = self.state.setdefault(param, {})
            buffer = state.get("momentum_buffer")
            if buffer is None:
                buffer = step_direction.clone()
                state["momentum_buffer"] = buffer
            else:
                buffer.mul_(momentum)
                buffer.add_(step_direction * (1.0 - group["dampening"]))
            if group["nesterov"]:
                step_direction = step_direction + buffer * momentum
            else:
                step_direction = buffer
        param.sub_(step_direction * lr)


class Adam(Optimizer):
    """Adam, as torch's (amsgrad not supported): with g = grad (+ weight_decay * p, coupled),

        m = beta1 * m + (1 - beta1) * g          v = beta2 * v + (1 - beta2) * g * g
        p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

    A parameter's step is one kernel (`mini._C.adam_step_`: one pass over its elements, on the
    CPU or on CUDA) where the parameter, its gradient and its state are contiguous float32 or
    float64, and a group's parameters are stepped in one call from Python (`adam_steps_`);
    `fused=False` asks for the op-by-op step instead, 14 eager kernels a parameter (what the
    formula above costs without fusion: `mini.metrics.kernel_launches` counts both). The two
    compute the same bits. `foreach` is accepted and changes nothing."""

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 foreach=None, fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if amsgrad:
            raise NotImplementedError(f"{type(self).__name__}(amsgrad=True) is not supported by mini")
        self.fused = fused is not False
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    def step(self):
        """Updates every parameter that has a gradient, in place, outside autograd: a group's
        fusable parameters in one call (`adam_steps_`), the rest op by op."""
        if not self.fused:
            return super().step()
        with mini.no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                states = [self._next_state(p) for p in params]
                lr, eps, wd = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
                beta1, beta2 = (float(b) for b in group["betas"])
                done = _C.adam_steps_(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                                      [s["exp_avg_sq"] for s in states], [s["step"] for s in states],
                                      lr, beta1, beta2, eps, wd, self._decoupled)
                for param, state, fused in zip(params, states, done):
                    if not fused:
                        self._op_by_op(param, group, state)

    def _next_state(self, param):
        """The parameter's state, made on its first step, with its step count advanced."""
        state = self.state.setdefault(param, {})
        if not state:
            state["step"] = 0
            state["exp_avg"] = mini.zeros_like(param)
            state["exp_avg_sq"] = mini.zeros_like(param)
        state["step"] += 1
        return state

    def _update(self, param, group):
        state = self._next_state(param)
        if self.fused and _C.adam_steps_([param], [param.grad], [state["exp_avg"]], [state["exp_avg_sq"]],
                                         [state["step"]], float(group["lr"]), *(float(b) for b in group["betas"]),
                                         float(group["eps"]), float(group["weight_decay"]), self._decoupled)[0]:
            return
        self._op_by_op(param, group, state)

    def _op_by_op(self, param, group, state):
        lr, eps, wd = float(group["lr"]), float(group["eps"]), float(group["weight_decay"])
        beta1, beta2 = (float(b) for b in group["betas"])
        t = state["step"]
        grad = param.grad
        m, v = state["exp_avg"], state["exp_avg_sq"]
        if wd != 0:
            if self._decoupled:
                param.mul_(1.0 - lr * wd)
            else:
                grad = grad + param * wd
        m.mul_(beta1).add_(grad * (1.0 - beta1))
        v.mul_(beta2).add_(grad * grad * (1.0 - beta2))
        denom = v.sqrt() * (1.0 / (1.0 - beta2 ** t) ** 0.5) + eps
        param.sub_(m / denom * (lr / (1.0 - beta1 ** t)))


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter), as torch's AdamW: each step
    first scales p by (1 - lr * weight_decay), then applies Adam without weight decay in g.
    GPT training puts weight-decayed matrices and undecayed biases and norms in two groups:

        AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
              lr=3e-4, betas=(0.9, 0.95))
    """

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                 foreach=None, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach, fused)
