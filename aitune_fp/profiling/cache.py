"""Cold-cache timing on CUDA: evict the L2 before each timed call, untimed (docs/gpu.md)."""

from __future__ import annotations

from collections.abc import Callable

from aitune_fp.errors import InvalidValueError

#: The L2 size assumed when torch does not report one (larger than any GPU's L2 so far).
FALLBACK_L2_BYTES = 128 * 1024 * 1024


def l2_flusher(timer: object) -> Callable[[], None]:
    """A function overwriting the L2 of ``timer``'s CUDA device with a buffer allocated once now."""
    device = getattr(timer, "device", None)
    if getattr(device, "type", None) != "cuda":
        raise InvalidValueError(
            f"cache='cold' needs a CUDA device (it flushes the GPU's L2 before each call); "
            f"{type(timer).__name__} times none: use cache='hot'"
        )
    import torch

    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0) or FALLBACK_L2_BYTES
    buffer = torch.empty(2 * l2, dtype=torch.uint8, device=device)

    def flush() -> None:
        buffer.fill_(1)

    return flush
