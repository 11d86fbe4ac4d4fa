"""The lowering's front end: a module traced with torch.fx, decomposed into the primitives
of `ir.py` by the op handlers the catalogue lists. Imports nothing from `schedule/` or `emit/`."""
