"""The one exception type that the command line turns into a one-line error."""


class HeadscopeError(Exception):
    """Bad input or an unusable checkpoint: shown to the user as one line, exit 2.

    Anything else that escapes is a bug in headscope and keeps its traceback.
    """


def expected_got(what: str, expected, got) -> str:
    """Format the Equinox-style message `what: expected X, got Y`."""
    return f"{what}: expected {expected}, got {got}"
