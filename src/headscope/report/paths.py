"""Paths of per-item pages, shared by every stage that writes about the same item."""

ATLAS_PAGE = "atlas.html"   #: the atlas stage's page of every head


def head_page(layer: int, head: int) -> str:
    """Path of the page of head L.H (``heads/L0H3.html``)."""
    return f"heads/L{layer}H{head}.html"


def neuron_page(j: int) -> str:
    """Path of the page of MLP0 neuron j (``neurons/n123.html``)."""
    return f"neurons/n{j}.html"
