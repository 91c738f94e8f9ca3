"""SGD, Adam and AdamW steps, the global-norm clip and gradient accumulation, exactly.

torch's single-tensor algorithms, with every element operation one binary32
operation (no FMA) in the order written below, and every host scalar the
binary32 nearest its exact value in the binary32 hyperparameters
(`oracles.scalars`). Torch itself computes host scalars in binary64 and may
fuse, so its bits differ by design; the trajectories agree within rounding.

SGD, per element (g the gradient, p the parameter, b the momentum buffer):
    g = -g                                  if maximize
    g = g + wd*p                            if weight_decay != 0
    b = g (first step), else b = b*mu + (1-dampening)*g     if momentum != 0
    g = g + mu*b if nesterov, else g = b    if momentum != 0
    p = p - lr*g

Adam / AdamW at step t (one-based), m and v the moments:
    g = -g                                  if maximize
    p = p * (1 - lr*wd)                     AdamW (decoupled), if wd != 0
    g = g + wd*p                            Adam (coupled), if wd != 0
    m = b1*m + (1-b1)*g                     mul/add, not torch's lerp (see contracts/optim.md)
    v = b2*v + (1-b2)*(g*g)
    d = sqrt(v) / sqrt(1 - b2^t) + eps
    p = p - (lr / (1 - b1^t)) * (m / d)

Clip (torch's clip_grad_norm_ with norm_type=2): norm_j = sqrt(sumsq(g_j)),
total = sqrt(fold([norm_j*norm_j])), coef = min(max_norm / (total + 1e-6), 1),
g = g * coef for every gradient.

Cast twins: a step that updates a parameter may also write its twin, a bfloat16 or
float16 copy of the new float32 master value (`twin_bits`, the casts of oracles/mixed.py:
round to nearest even, subnormals kept, overflow to inf, NaN to the canonical quiet NaN).

Reproducibility: pure Python; the same bits on every machine.

>>> h = AdamHyper.of(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
>>> p, m, v = adam_elem(1.0, 0.5, 0.0, 0.0, h.scalars(1))
>>> p   # the first Adam step moves by lr, whatever the gradient's size
0.9990000128746033
"""
from __future__ import annotations

from dataclasses import dataclass

from . import f32, mixed, scalars
from .fold import fold_tree, pairwise
from .fold import sumsq as fold_sumsq

CLIP_EPS = f32.round_float(1e-6)


@dataclass(frozen=True)
class SGDHyper:
    lr: float
    momentum: float
    dampening: float
    weight_decay: float
    nesterov: bool
    maximize: bool

    @classmethod
    def of(cls, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False):
        r = f32.round_float
        return cls(r(lr), r(momentum), r(dampening), r(weight_decay), bool(nesterov), bool(maximize))

    def scalars(self) -> "SGDScalars":
        return SGDScalars(self.lr, self.momentum, scalars.one_minus(self.dampening), self.weight_decay,
                          self.momentum != 0.0, self.weight_decay != 0.0, self.nesterov, self.maximize)


@dataclass(frozen=True)
class SGDScalars:
    lr: float
    momentum: float
    one_minus_dampening: float
    weight_decay: float
    use_momentum: bool
    use_decay: bool
    nesterov: bool
    maximize: bool


def sgd_elem(p: float, g: float, b: float, first: bool, s: SGDScalars) -> tuple[float, float]:
    """One element of an SGD step: (new p, new momentum buffer)."""
    if s.maximize:
        g = -g
    if s.use_decay:
        g = f32.add(g, f32.mul(s.weight_decay, p))
    if s.use_momentum:
        if first:
            b = g
        else:
            b = f32.add(f32.mul(b, s.momentum), f32.mul(s.one_minus_dampening, g))
        g = f32.add(g, f32.mul(s.momentum, b)) if s.nesterov else b
    return f32.sub(p, f32.mul(s.lr, g)), b


@dataclass(frozen=True)
class AdamHyper:
    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    decoupled: bool
    maximize: bool = False

    @classmethod
    def of(cls, lr, betas, eps, weight_decay, decoupled=False, maximize=False):
        r = f32.round_float
        return cls(r(lr), r(betas[0]), r(betas[1]), r(eps), r(weight_decay), bool(decoupled), bool(maximize))

    def scalars(self, t: int) -> "AdamScalars":
        """The host scalars of step t (one-based), each the float32 nearest its exact value."""
        decay = self.weight_decay != 0.0
        return AdamScalars(
            beta1=self.beta1, beta2=self.beta2, eps=self.eps, weight_decay=self.weight_decay,
            one_minus_beta1=scalars.one_minus(self.beta1),
            one_minus_beta2=scalars.one_minus(self.beta2),
            step_size=scalars.div_one_minus_pow(self.lr, self.beta1, t),
            sqrt_bc2=scalars.sqrt_one_minus_pow(self.beta2, t),
            param_decay=scalars.one_minus_mul(self.lr, self.weight_decay) if decay else 1.0,
            coupled=decay and not self.decoupled, decoupled=decay and self.decoupled,
            maximize=self.maximize)


@dataclass(frozen=True)
class AdamScalars:
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    one_minus_beta1: float
    one_minus_beta2: float
    step_size: float  # lr / (1 - beta1^t)
    sqrt_bc2: float  # sqrt(1 - beta2^t)
    param_decay: float  # 1 - lr*wd (AdamW)
    coupled: bool
    decoupled: bool
    maximize: bool


def adam_elem(p: float, g: float, m: float, v: float, s: AdamScalars) -> tuple[float, float, float]:
    """One element of an Adam/AdamW step: (new p, new m, new v)."""
    if s.maximize:
        g = -g
    if s.decoupled:
        p = f32.mul(p, s.param_decay)
    if s.coupled:
        g = f32.add(g, f32.mul(s.weight_decay, p))
    m = f32.add(f32.mul(s.beta1, m), f32.mul(s.one_minus_beta1, g))
    v = f32.add(f32.mul(s.beta2, v), f32.mul(s.one_minus_beta2, f32.mul(g, g)))
    d = f32.add(f32.div(f32.sqrt(v), s.sqrt_bc2), s.eps)
    return f32.sub(p, f32.mul(s.step_size, f32.div(m, d))), m, v


def clip_coef(sumsqs: list[float], max_norm: float) -> tuple[float, float]:
    """(total norm, clip coefficient) from the per-tensor sums of squares."""
    norms = [f32.sqrt(s) for s in sumsqs]
    total = f32.sqrt(fold_tree([f32.mul(n, n) for n in norms]))
    coef = f32.div(f32.round_float(max_norm), f32.add(total, CLIP_EPS))
    return total, (1.0 if coef > 1.0 else coef)


def clip(grads: list[list[float]], max_norm: float) -> tuple[float, float, list[list[float]]]:
    """The global-norm clip over tensors in registry order: (total, coef, scaled grads)."""
    total, coef = clip_coef([fold_sumsq(g) for g in grads], max_norm)
    return total, coef, [[f32.mul(x, coef) for x in g] for g in grads]


def accumulate(microbatches: list[list[float]]) -> list[float]:
    """Elementwise sum of microbatch gradients by the pairwise tree, in ascending order."""
    return list(pairwise(microbatches, lambda a, b: [f32.add(x, y) for x, y in zip(a, b)]))


TWIN_NONE, TWIN_BF16, TWIN_F16 = 0, 1, 2  # the kernels' kind flag of a tensor's twin


def twin_bits(p: float, kind: int) -> int:
    """The bit pattern of the twin of master value p: bfloat16 (kind 1) or float16 (kind 2),
    rounded as mojolike.cast rounds (oracles/mixed.py)."""
    u = f32.f32_to_bits(p)
    return mixed.to_bf16_bits(u) if kind == TWIN_BF16 else mixed.to_f16_bits(u)
