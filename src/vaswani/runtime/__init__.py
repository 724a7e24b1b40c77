"""Where and how torch runs: the device and autocast (device), threads, the allocator, the CPU's name (machine), the
precision chosen for a model, FLOPs and MFU, the loss's chunk of rows."""
