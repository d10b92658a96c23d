"""Paths of per-item pages shared by every stage that writes about the same item."""


def head_page(layer: int, head: int) -> str:
    """Path of the page of head L.H (``heads/L0H3.html``)."""
    return f"heads/L{layer}H{head}.html"


def neuron_page(j: int) -> str:
    """Path of the page of MLP0 neuron j (``neurons/n123.html``)."""
    return f"neurons/n{j}.html"


class Layer0View:
    """The model as layer-0 analyses see it: ``weights()`` holds block 0 only.

    Layer-0 analyses (calibration, denominators, the contextual circuit) convert the
    weights to float64; on this view they copy the embeddings and one block instead of
    every layer, which keeps the report's peak memory down. Every number is the same:
    nothing they compute reads a later block. Everything else is the model's.
    """

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)

    def weights(self, processing=None):
        import dataclasses

        W = self._model.weights(processing)
        return dataclasses.replace(W, blocks=W.blocks[:1], cfg=dataclasses.replace(W.cfg, n_layers=1))
