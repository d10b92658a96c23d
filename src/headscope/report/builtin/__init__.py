"""Built-in report stages. Importing this package registers them, in this order.

To add a stage to the default report, write a module here with one
``@register_stage`` class and import it below (the import order is the run order).
"""

from . import model, attention, kernels, denominators, calibration, neurons, activations  # noqa: F401
from . import survey, semantic, steering  # noqa: F401
from . import atlas, composition  # noqa: F401
from . import claims  # noqa: F401  (optional: --claims or --stages claims)

from ..stages import Stage, registered_stages


def default_stages() -> list[Stage]:
    """Instances of every registered stage, in order (the built-in ones, imported above, first)."""
    return registered_stages()
