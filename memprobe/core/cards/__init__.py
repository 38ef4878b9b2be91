"""GPU cards: the catalog, the names people type, memory sizes, the allocator's overhead, the memory cap."""
