"""How a benchmark class gets a ``setup_cache`` of its own (for every family base here)."""


def own_setup_cache(cls: type, measure, timeout: float) -> None:
    """Give ``cls`` a ``setup_cache`` returning ``measure(self)``, asv-keyed by ``cls``.

    asv keys a setup_cache by its function's module and first source line, so one
    inherited from a base would be shared: the first family's cache handed to all. Each
    class gets its own, whose source (for that key and for asv's version hash) is the
    class itself."""

    def setup_cache(self):
        return measure(self)

    setup_cache.__wrapped__ = cls
    setup_cache.__module__ = cls.__module__
    setup_cache.__qualname__ = f"{cls.__qualname__}.setup_cache"
    setup_cache.timeout = timeout
    cls.setup_cache = setup_cache
