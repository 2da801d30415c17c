"""Modules and parameters: the torch.nn building blocks, in plain Python over mini tensors.

What comes in: mini tensors. What goes out: mini tensors, computed by the eager C++ ops (or by
a compiled graph, through `Module.compile`). A `Module` finds its parameters and submodules
the way torch's does: assigning a `Parameter` or a `Module` to an attribute registers it in
`_parameters` or `_modules`, and `parameters()` walks that tree.

This file is imported by `mini/__init__.py` after every tensor function is defined, so
`mini.Tensor` exists when `Parameter` subclasses it below.
"""

from collections import OrderedDict

import mini

from . import functional as F


class Parameter(mini.Tensor):
    """A tensor that is a module's learnable state: requires grad, and is registered by
    `Module.__setattr__`. It aliases the storage of the tensor it was made from."""

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = mini.empty(0)
        if not isinstance(data, mini.Tensor):
            raise TypeError(
                f"Parameter(data): data must be a mini.Tensor, got {type(data).__name__}; "
                "wrap Python numbers or lists with mini.tensor(...) first"
            )
        super().__init__(data.detach())
        self.requires_grad_(requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__  # print(param) shows the header too, as in torch


class Module:
    """Base class of every layer and model.

    Subclasses call `super().__init__()` first, then assign parameters and submodules as
    attributes, and define `forward`. Calling the module calls `forward`.
    """

    def __init__(self):
        # object.__setattr__ skips our own __setattr__, which needs these dicts to exist.
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())

    # ---- calling ----------------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    def __call__(self, *args, **kwargs):
        compiled = self.__dict__.get("_compiled_call")
        if compiled is not None:
            return compiled(*args, **kwargs)
        return self.forward(*args, **kwargs)

    def compile(self, **kwargs):
        """Compile this module in place, like torch's Module.compile: later calls of the
        module run its forward compiled (with mini.compile's keyword arguments; a class's own
        __call__ still runs first, as in torch). Returns None."""
        object.__setattr__(self, "_compiled_call", mini._compile._compile_forward(self, **kwargs))

    # ---- registration -----------------------------------------------------------------------

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign '{name}' before Module.__init__() call; "
                f"call super().__init__() first in {type(self).__name__}.__init__"
            )
        params = self._parameters
        modules = self._modules
        if isinstance(value, Parameter):
            self.__dict__.pop(name, None)
            modules.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            self.__dict__.pop(name, None)
            params.pop(name, None)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                    "(mini.nn.Parameter or None expected)"
                )
            params[name] = None
        elif name in modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' "
                    "(mini.nn.Module or None expected)"
                )
            modules[name] = None
        elif name in self._buffers:
            if value is not None and not isinstance(value, mini.Tensor):
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                    "(mini.Tensor or None expected)"
                )
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        # Called only when normal lookup fails: look in the registries.
        registries = self.__dict__
        if "_parameters" in registries and name in registries["_parameters"]:
            return registries["_parameters"][name]
        if "_buffers" in registries and name in registries["_buffers"]:
            return registries["_buffers"][name]
        if "_modules" in registries and name in registries["_modules"]:
            return registries["_modules"][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._modules:
            del self._modules[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers.discard(name)
        else:
            object.__delattr__(self, name)

    def register_parameter(self, name, param):
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{type(param).__name__}' as parameter '{name}' "
                "(mini.nn.Parameter or None expected)"
            )
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Registers `tensor` as state that is not a parameter (a causal mask, running
        statistics): moved by .to()/.cuda(), listed by buffers(), saved by state_dict() unless
        persistent=False; read in compiled code from the registry, as parameters are."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"buffer name must be a non-empty string without '.', got {name!r}")
        if tensor is not None and not isinstance(tensor, mini.Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(mini.Tensor or None required)")
        if name in self._parameters or name in self._modules or (name in self.__dict__ and name not in self._buffers):
            raise KeyError(f"attribute '{name}' already exists")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._modules[name] = module

    # ---- walking the tree -------------------------------------------------------------------

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """Yields (qualified name, module) for this module and every module below it."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is None:
                continue
            child_prefix = prefix + "." + name if prefix else name
            yield from child.named_modules(memo, child_prefix, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self):
        for _, child in self.named_children():
            yield child

    def _named_registered(self, registry, prefix, recurse, remove_duplicate):
        """(qualified name, tensor) of one registry ("_parameters" or "_buffers") of this module
        and, with recurse, of every module below; a tensor two modules share, once."""
        if recurse:
            owners = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
        else:
            owners = [(prefix, self)]
        seen = set()
        for owner_prefix, owner in owners:
            for name, tensor in getattr(owner, registry).items():
                if tensor is None or (remove_duplicate and id(tensor) in seen):
                    continue
                seen.add(id(tensor))
                yield (owner_prefix + "." + name if owner_prefix else name), tensor

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """Yields (qualified name, parameter), e.g. ("0.weight", ...) inside a Sequential.
        A parameter shared by two modules is yielded once unless remove_duplicate=False."""
        return self._named_registered("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        """Yields (qualified name, buffer) for every registered buffer, as named_parameters."""
        return self._named_registered("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def apply(self, fn):
        """Calls fn(module) on every submodule, children first, then on self (as torch: the
        usual way to initialise weights). Returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ---- saving and loading -----------------------------------------------------------------

    def state_dict(self, prefix="", keep_vars=False):
        """An OrderedDict of every parameter and persistent buffer by qualified name
        ("0.weight", "h.1.attn.bias"): detached tensors sharing the module's storage
        (keep_vars=True: the parameters themselves)."""
        out = OrderedDict()
        for module_prefix, module in self.named_modules(prefix=prefix.rstrip(".")):
            for name, param in module._parameters.items():
                if param is not None:
                    out[(module_prefix + "." if module_prefix else "") + name] = param if keep_vars else param.detach()
            for name, buf in module._buffers.items():
                if buf is not None and name not in module._non_persistent_buffers:
                    out[(module_prefix + "." if module_prefix else "") + name] = buf if keep_vars else buf.detach()
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Copies each tensor of `state_dict` into the parameter or buffer of the same name,
        in place (shapes must match; dtype and device are the module's). strict=True: a key
        missing on either side raises, naming them all. Returns (missing_keys, unexpected_keys)."""
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: "
                               f"missing keys {missing}, unexpected keys {unexpected}")
        for key, target in own.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            if not isinstance(value, mini.Tensor):
                raise TypeError(f"state_dict['{key}'] is a {type(value).__name__}, not a mini.Tensor")
            if tuple(value.shape) != tuple(target.shape):
                raise RuntimeError(f"size mismatch for {key}: copying a tensor of shape {tuple(value.shape)}, "
                                   f"the module's is {tuple(target.shape)}")
            with mini.no_grad():
                target.copy_(value.to(device=target.device, dtype=target.dtype))
        return missing, unexpected

    # ---- modes and gradients ----------------------------------------------------------------

    # ---- devices and dtypes --------------------------------------------------------------------

    def to(self, *args, **kwargs):
        """Moves (or casts) every parameter, and its gradient, in place, and every buffer, as
        torch's Module.to:
        module.to('cuda'), module.to(mini.float64), module.to('cuda', mini.bfloat16). Only
        floating parameters change dtype. Returns self."""
        dtype = kwargs.get("dtype")
        device = kwargs.get("device")
        for a in args:
            if isinstance(a, mini.dtype):
                dtype = a
            elif isinstance(a, (str, mini.device)):
                device = a
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}")

        def convert(t):
            want = dtype if dtype is not None and t.dtype.is_floating_point else None
            return t.detach().to(device=device, dtype=want)
        for p in self.parameters():
            p.data = convert(p)
            if p.grad is not None:
                p.grad.data = convert(p.grad)
        for module in self.modules():
            for name, buf in module._buffers.items():
                if buf is not None:
                    module._buffers[name] = convert(buf)
        return self

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device)

    def cpu(self):
        return self.to("cpu")

    def float(self):
        return self.to(mini.float32)

    def double(self):
        return self.to(mini.float64)

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        self.training = mode
        for child in self.children():
            child.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Clears every parameter's .grad: to None (the default), or to zeros in place."""
        for param in self.parameters():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                param.grad.zero_()

    # ---- printing ---------------------------------------------------------------------------

    def extra_repr(self):
        """What a subclass prints inside its parentheses, e.g. 'in_features=4, ...'."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for name, child in self._modules.items():
            child_text = _indent(repr(child), 2)
            lines.append(f"({name}): {child_text}")
        head = type(self).__name__ + "("
        if not lines:
            return head + ")"
        if len(lines) == 1 and not self._modules:
            return head + lines[0] + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


def _indent(text, spaces):
    """Indents every line of `text` but the first (the first follows '(name): ')."""
    first, *rest = text.split("\n")
    pad = " " * spaces
    return "\n".join([first] + [pad + line for line in rest])


# ---- layers ---------------------------------------------------------------------------------


def _uniform(shape, bound):
    """A tensor of `shape` with values uniform in [-bound, bound)."""
    return (mini.rand(*shape) * 2.0 - 1.0) * bound


class Linear(Module):
    """y = x @ weight.t() + bias, with weight [out_features, in_features].

    Initialised like torch: weight and bias uniform in +-1/sqrt(in_features) (what torch's
    kaiming_uniform_(a=sqrt(5)) works out to)."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        bound = 1.0 / in_features**0.5 if in_features > 0 else 0.0
        self.weight = Parameter(_uniform((out_features, in_features), bound))
        if bias:
            self.bias = Parameter(_uniform((out_features,), bound))
        else:
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        has_bias = self.bias is not None
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={has_bias}"
        )


class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return F.relu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class LayerNorm(Module):
    """Normalises over the last len(normalized_shape) dims, then scales by weight and shifts
    by bias (ones and zeros at first) when elementwise_affine is True."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(mini.ones(*self.normalized_shape))
            if bias:
                self.bias = Parameter(mini.zeros(*self.normalized_shape))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}"
        )


class _ModuleSequence(Module):
    """What Sequential and ModuleList share: their modules in order, named "0", "1", ...,
    with len(), iteration and indexing. mini's capture reads these two classes' modules from
    `_modules` itself (capture/interpret_containers.cpp), guarded on its keys, so a compiled
    forward may loop over them or index them with a constant."""

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._sliced(list(self._modules.items())[index])
        modules = list(self._modules.values())
        if not isinstance(index, int):
            raise TypeError(f"{type(self).__name__} indices must be integers or slices, not {type(index).__name__}")
        if not -len(modules) <= index < len(modules):
            raise IndexError(f"index {index} is out of range for {type(self).__name__} of length "
                             f"{len(modules)}")
        return modules[index]

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self


class Sequential(_ModuleSequence):
    """Runs its modules in order, each one's output the next one's input.

    Sequential(a, b, c) names them "0", "1", "2"; Sequential(OrderedDict(...)) keeps names."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for index, module in enumerate(args):
                self.add_module(str(index), module)

    def forward(self, input):
        for module in self:
            input = module(input)
        return input

    def _sliced(self, items):
        return Sequential(OrderedDict(items))


class ModuleList(_ModuleSequence):
    """A list of modules, registered (their parameters are the owner's): ModuleList([a, b]),
    .append, .extend, len, iteration, indexing. It has no forward: the owner loops over it."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def __setitem__(self, index, module):
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for ModuleList of length {len(self)}")
        self.add_module(str(index % len(self)), module)

    def _sliced(self, items):
        return ModuleList(module for _, module in items)


class ModuleDict(Module):
    """A dict of modules by name, registered: ModuleDict({"wte": ..., "h": ...}); read as
    md["wte"] or md.wte (compiled code reads the attribute form from `_modules`)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for name, module in items:
            self[name] = module

    def __getitem__(self, name):
        return self._modules[name]

    def __setitem__(self, name, module):
        if not isinstance(name, str):
            raise TypeError(f"ModuleDict keys must be str, got {type(name).__name__}")
        self.add_module(name, module)

    def __delitem__(self, name):
        del self._modules[name]

    def __contains__(self, name):
        return name in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()


class Embedding(Module):
    """A lookup table: row i of weight [num_embeddings, embedding_dim] is token i's vector,
    initialised N(0, 1) as torch's."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None):
        super().__init__()
        if padding_idx is not None:
            raise NotImplementedError("nn.Embedding(padding_idx=...) is not supported by mini yet")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = Parameter(mini.randn(num_embeddings, embedding_dim))

    def forward(self, input):
        return F.embedding(input, self.weight)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Dropout(Module):
    """Zeroes each element with probability p while training, scaling the rest by 1/(1-p);
    the identity in eval mode (module.eval())."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"
