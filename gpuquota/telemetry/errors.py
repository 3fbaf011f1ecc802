"""What a failing source raises: the reason shown on its page, kept short and free of
secrets."""


class SourceError(Exception):
    """A source could not be read (DNS, refused, timeout, 5xx, auth) or answered with
    something gpuquota refuses (not the format, too large, hostile): nothing is stored."""

    def __init__(self, reason: str):
        super().__init__(reason[:500])
        self.reason = reason[:500]
