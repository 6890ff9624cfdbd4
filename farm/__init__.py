"""tvm-farm: shared, incremental tuning for Apache TVM."""

__version__ = "0.1.0"
