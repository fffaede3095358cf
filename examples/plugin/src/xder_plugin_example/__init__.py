"""An example xder plugin: ``er_balanced`` (method), ``seq-stripes`` (benchmark) and ``tiny-cnn``
(backbone). Each module registers its name when imported; ``xder-run`` imports them through the
entry points of this package (``pyproject.toml``). Importing this package registers nothing."""

__all__: list[str] = []
