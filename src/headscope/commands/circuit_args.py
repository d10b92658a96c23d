"""Arguments of the commands that use a calibrated contextual circuit (``neurons``, ``neuron``)."""

from __future__ import annotations

from .. import shipped
from .._errors import HeadscopeError
from ..layer0.calibration import calibrate, load_calibration
from ..layer0.contextual import HEAD_SETS, Circuit, HeadChoice, build_circuit
from .._input import read_text_file
from ..layer0.split import SEED_QUERY
from ..core.model import Model


def add_calibration_arguments(p) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--calibration", metavar="JSON", help="calibration file written by `headscope calibrate`")
    g.add_argument("--calibration-text", metavar="FILE",
                   help="calibrate on this UTF-8 text now (default: headscope's shipped calibration text)")
    p.add_argument("--query", default=SEED_QUERY, help="query token when calibrating now; default ' the'")
    p.add_argument("--window", type=int, default=None, help="calibration window in tokens (BOS included); default n_ctx")
    p.add_argument("--heads", default=None,
                   help="layer-0 heads of the circuit: comma-separated indices (e.g. 0,2,6,8,9,10,11), 'seed' (the "
                        "published 0,2,6,8,9,10), 'code' (0,2,6,8,9,10,11, as Gibson's code) or 'auto' "
                        "(default: chosen automatically)")
    p.add_argument("--position", type=int, default=None,
                   help="query position n of the circuit; default the last calibrated position")


def parse_heads(spec: str | None, cfg) -> list[int] | None:
    """--heads: None or 'auto' → automatic choice; 'seed' / 'code' → the named set; else indices."""
    if spec is None or spec.strip() == "auto":
        return None
    if spec.strip() in HEAD_SETS:
        spec = ",".join(map(str, HEAD_SETS[spec.strip()]))
    try:
        heads = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise HeadscopeError(f"--heads: expected comma-separated head indices such as 0,2,6, got {spec!r}") from None
    if not heads or any(not 0 <= h < cfg.n_heads for h in heads):
        raise HeadscopeError(f"--heads: expected indices in 0..{cfg.n_heads - 1}, got {spec!r}")
    return heads


def circuit_from_args(args, model: Model) -> tuple[Circuit, HeadChoice]:
    """(circuit, head choice) from --calibration / --calibration-text / the shipped text."""
    if args.calibration:
        cal = load_calibration(args.calibration, model)
    else:
        text = (read_text_file(args.calibration_text, "calibration text") if args.calibration_text
                else shipped.calibration_text().text)
        cal = calibrate(model, text, query=args.query, window=args.window)
    return build_circuit(model, cal, heads=parse_heads(args.heads, model.cfg), position=args.position)
