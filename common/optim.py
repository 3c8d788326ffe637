"""The one Adam every learner here uses: Paddle's Adam with its merged (multi-tensor) update.

``paddle.optimizer.Adam(..., use_multi_tensor=True)`` updates all parameters in one kernel
call instead of one call per parameter: the same update rule (moments, bias correction,
epsilon, global-norm clipping before it), rounded differently in the last bit or two
(tests/test_optim.py bounds the drift), and faster on a CPU (``docs/performance.md``, "The
Double DQN train step: Adam and the dense layers").

Its one condition: **every parameter gets a gradient in every step.** The merged kernel
fixes its list of parameters at the first step; a later step with a different set of
gradients fails with Paddle's "The size of Input(grad) must be equal to Input(param)".
Every network here uses all its parameters in every loss, so the condition holds; an
optimizer over parameters that only some steps reach needs its own plain Adam.
"""

from __future__ import annotations

import paddle


def adam(parameters, lr: float, *, epsilon: float = 1e-8, grad_clip=None) -> paddle.optimizer.Adam:
    """Adam (beta 0.9 / 0.999) over ``parameters`` with the merged update; ``grad_clip`` e.g.
    ``nn.ClipGradByGlobalNorm(0.5)``, applied before the step as in the plain Adam."""
    return paddle.optimizer.Adam(
        learning_rate=lr,
        parameters=list(parameters),
        epsilon=epsilon,
        grad_clip=grad_clip,
        use_multi_tensor=True,
    )
