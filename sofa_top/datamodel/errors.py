"""Errors the CLI turns into one clear line on stderr and a non-zero exit."""


class UserError(Exception):
    """Bad input or an unusable environment; the message is shown as-is, without a traceback."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
