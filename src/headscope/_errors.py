"""The exception types that the command line turns into a one-line error."""


class HeadscopeError(Exception):
    """Bad input or an unusable checkpoint: shown to the user as one line, exit 2.

    Anything else that escapes is a bug in headscope and keeps its traceback.
    """


class BadArgument(HeadscopeError, ValueError):
    """A bad argument to a library call (``headscope.load(dtype=torch.int8)``): a ValueError
    for Python callers, one line (exit 2) on the command line. The message shows expected vs got."""


class NotApplicable(HeadscopeError):
    """An analysis that does not apply to this model or input (not a bug, not bad input).

    Examples: no layer-0 head qualifies for the contextual circuit; the circuit's token
    weights exceed float64. The message is the reason. The command line shows it as one
    line (exit 2); a report stage records ``{"not_applicable": reason}`` as its data and
    renders the reason, and the report goes on.
    """


def expected_got(what: str, expected, got) -> str:
    """Format the Equinox-style message `what: expected X, got Y`."""
    return f"{what}: expected {expected}, got {got}"
