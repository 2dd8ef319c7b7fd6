"""The error a setting that cannot work raises at startup: the message names the field (or the
option) and its value. Every folder raises it, so it lives below them all and imports nothing."""


class DFlashConfigError(ValueError):
    """A drafter config or server setting that cannot work; the message names the field and its value."""
