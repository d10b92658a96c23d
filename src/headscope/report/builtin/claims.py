"""Stage ``claims`` (optional: ``headscope report MODEL --stages claims`` or ``--claims``): the seeds'
claims table on the model, with each row's component linked to its page.

The table is :func:`headscope.claims.run.claims_table`: a planted checkpoint against its manifest,
a GPT-2-Small-shaped model against the seeds' figures, any other model on its own components
(``reproduce --find``). The page ``claims.html`` shows each row's component, measured value against
its null, verdict and why that component; every component's head or neuron page gets the claims
that read it. Optional because it runs the whole claims table (minutes on a GPT-2-sized model).
"""

from __future__ import annotations

from .. import html as H
from ..stages import Context, PageSection, Rendered, Stage, register_stage
from ..views import reproduce as V


@register_stage
class ClaimsStage(Stage):
    name = "claims"
    title = "The seeds' claims"
    version = 1
    optional = True
    inputs = ()
    nullable = ("rows[].published", "rows[].published[]", "rows[].measured", "rows[].measured[]", "rows[].passed",
                "rows[].null", "rows[].null.*", "components[].null.*")

    def compute(self, ctx: Context) -> dict:
        from ...claims.run import claims_table

        ctx.progress.set_total(1)
        d = claims_table(ctx.model).to_dict()
        ctx.progress.update()
        return d

    def render(self, data: dict, ctx) -> Rendered:
        page = PageSection(path=V.CLAIMS_PAGE, title="The seeds' claims", group="Claims", order=(0,),
                           body=V.claims_page(data))
        by_path: dict[str, tuple[str, list]] = {}          # one section per page, every component it shows
        for c in data.get("components") or []:
            for label, path in V.component_pages(c):
                by_path.setdefault(path, (label, []))[1].append(c)
        pages = [page]
        for path, (label, comps) in sorted(by_path.items()):
            kind = "MLP0 neurons" if path.startswith("neurons/") else "Attention heads"
            pages.append(PageSection(path=path, title=f"MLP0 neuron {label[1:]}" if kind == "MLP0 neurons" else f"Head {label}",
                                     group=kind, order=_order(label, kind),
                                     body=H.join([V.component_section(data, c, path) for c in comps])))
        index = [H.Safe("<p>") + H.link(V.CLAIMS_PAGE, "Open the claims table") + H.Safe(
            f" — {data['n_pass']} pass, {data['n_fail']} fail; published column: ") + data["reference"] + H.Safe("</p>")]
        return Rendered(index=index, summary=V.summary(data), pages=pages)


def _order(label: str, kind: str) -> tuple:
    if kind == "MLP0 neurons":
        return (int(label[1:]),)
    layer, head = label.split(".")
    return (int(layer), int(head))
