"""The pure core: values and functions with no I/O, clocks, logging or torch import."""
