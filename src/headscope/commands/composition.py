"""Q-, K- and V-composition scores of every pair of heads in different layers, from the weights.

The Framework's score ‖W_OV^A M_B‖_F / (‖W_OV^A‖_F ‖M_B‖_F) (M_B = W_QK^B, its transpose,
or W_OV^B) after the default processing, which equals TransformerLens's; float64, from
d_head × d_head factors. Definitions in headscope.composition.

  headscope composition gpt2
  headscope composition planted/ --edges 20 --json
"""

from __future__ import annotations

from .._errors import HeadscopeError
from ..maps.composition import EDGES, composition
from ..report.views import composition as V
from .args import emit, load_model


def add_arguments(p):
    p.add_argument("model", help="hub id or checkpoint directory")
    p.add_argument("--edges", type=int, default=EDGES, help=f"strongest edges listed per mode (default {EDGES})")


def run(args) -> int:
    if args.edges < 1:
        raise HeadscopeError(f"--edges: expected ≥ 1, got {args.edges}")
    model = load_model(args)
    res = composition(model, k=args.edges)
    emit(args, res, V.text(res.to_dict()))
    return 0
