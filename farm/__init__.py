"""tvm-farm: shared, incremental tuning for Apache TVM."""

__version__ = "0.1.0"


def load(*args, **kwargs):
    """Load a tuned model from the registry; see :func:`farm.api.load`."""
    from farm.api import load as _load

    return _load(*args, **kwargs)
