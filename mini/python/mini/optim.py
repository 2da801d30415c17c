"""mini.optim: optimizers, torch-shaped, in plain Python over mini tensors.

An optimizer holds `param_groups`, a list of dicts each with 'params' (a list of tensors)
and the hyperparameters for them ('lr', ...). A learning-rate schedule edits them directly:

    opt = mini.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.param_groups[0]["lr"] = 0.01

`step()` updates every parameter in place under `mini.no_grad()`, from its `.grad`.
Per-parameter state (SGD's momentum buffer) lives in `self.state[param]`.
"""

import mini


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
        raise NotImplementedError(f"{type(self).__name__} does not define step()")

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

    def step(self):
        with mini.no_grad():
            for group in self.param_groups:
                for param in group["params"]:
                    if param.grad is not None:
                        self._update(param, group)

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
