"""Stage ``model``: configuration, fingerprint, processing, the inputs, embedding norms."""

from __future__ import annotations

from ...stats import bin_values, quantile
from .. import figures as F
from .. import html as H
from ..views.model import architecture
from ..stages import Context, Rendered, Stage, register_stage


@register_stage
class ModelStage(Stage):
    name = "model"
    title = "Model and inputs"
    version = 4     # 3: the BOS record (core.bos); 4: the processing applied (Processing.applicable), not asked
    inputs = ("calibration", "samples")

    def compute(self, ctx: Context) -> dict:
        model = ctx.model
        p = ctx.progress
        p.set_total(2)
        emb_norm, pos_norm = ctx.weights().embedding_norms()                   # [vocab], [n_ctx] (no padding rows)
        edges, counts = bin_values(emb_norm.tolist(), bins=40)
        p.update()
        samples = []
        for t in ctx.inputs.samples:
            d = t.to_dict()
            d["tokens"] = int(len(model.to_tokens(t.text)))
            samples.append(d)
        cal = ctx.inputs.calibration.to_dict()
        cal["tokens"] = int(len(model.to_tokens(ctx.inputs.calibration.text)))
        p.update()
        return {
            "fingerprint": model.fingerprint,
            "config": model.cfg.to_dict(),
            "n_parameters": model.n_parameters,
            "dtype": str(model.dtype).replace("torch.", ""),
            "bos": model.bos,
            "processing": ctx.weights().processing.to_dict(),      # what was applied: exact options only
            "inputs": {"calibration": cal, "samples": samples},
            "W_pos_norm": pos_norm.tolist(),
            "W_E_norm_hist": {"edges": edges, "counts": counts},
            "W_E_norm_quantiles": {f"p{round(100 * q)}": quantile(emb_norm, q) for q in (0.1, 0.5, 0.9)},
        }

    def render(self, data: dict, ctx) -> Rendered:
        c = data["config"]
        cfg_table = H.kv_table([
            ("layers", c["n_layers"]), ("heads per layer", c["n_heads"]), ("d_model", c["d_model"]),
            ("d_head", c["d_head"]), ("d_mlp", c["d_mlp"]), ("d_vocab", c["d_vocab"]), ("n_ctx", c["n_ctx"]),
            ("activation", c["act_fn"]), *architecture(c, data.get("bos")),
            ("parameters", f"{data['n_parameters']:,}"), ("dtype", data["dtype"]),
            ("weights fingerprint", H.code(data["fingerprint"])),
            ("processing", ", ".join(k for k, v in data["processing"].items() if v) or "none"),
        ], caption="Shapes are read from config.json; the analyses use the processed weights. The fingerprint is "
                "the sha256 of the weight file (of the shards' sha256sum lines when sharded; of the tensors for "
                "a model loaded from memory).")
        ins = data["inputs"]
        rows = [("calibration", ins["calibration"]["words"], ins["calibration"]["tokens"],
                 H.code(ins["calibration"]["sha256"][:16]))]
        rows += [(f"sample: {s['name']}", s["words"], s["tokens"], H.code(s["sha256"][:16])) for s in ins["samples"]]
        in_table = H.table(["text", "words", "tokens (with BOS)", "sha256 (prefix)"], rows, numeric=(1, 2),
                           caption="Input texts (replace with --calibration-text FILE and --samples FILE…).")
        pos = data["W_pos_norm"]
        fig_pos = H.figure(F.line_plot([F.Series(list(range(len(pos))), pos, "|W_pos[i]|")],
                                       title="Positional embedding norms", xlabel="position i", ylabel="norm"),
                           "Euclidean norm of the processed positional embedding W_pos[i] against position i.") \
            if pos else None                    # rotary: no W_pos, no figure (the table says how positions enter)
        hq = data["W_E_norm_quantiles"]
        fig_emb = H.figure(F.histogram(edges=data["W_E_norm_hist"]["edges"], counts=data["W_E_norm_hist"]["counts"],
                                       title="Token embedding norms", xlabel="|W_E[t]|", ylabel="tokens",
                                       markers=[(hq["p50"], "median")]),
                           f"Histogram of |W_E[t]| over all {c.get('n_tokens', c['d_vocab']):,} tokens (processed weights"
                           + (f"; the {c['d_vocab'] - c['n_tokens']:,} padding rows left out" if 'n_tokens' in c else "")
                           + f"); dashed line: median {hq['p50']:.3g}.")
        summary = [
            ("model sha256", H.code(data["fingerprint"][:16] + "…")),
            ("layers × heads", f"{c['n_layers']} × {c['n_heads']}"),
            ("d_model / d_mlp / d_vocab", f"{c['d_model']} / {c['d_mlp']} / {c['d_vocab']}"),
            ("parameters", f"{data['n_parameters']:,}"),
            ("median |W_E[t]|", hq["p50"]),
            ("sample texts", len(ins["samples"])),
        ]
        return Rendered(index=[cfg_table, in_table, H.grid([f for f in (fig_pos, fig_emb) if f is not None])],
                        summary=summary)
