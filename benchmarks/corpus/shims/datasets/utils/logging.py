"""``datasets.utils.logging`` verbosity setters (no-ops)."""


def set_verbosity_info() -> None:
    pass


def set_verbosity_error() -> None:
    pass
