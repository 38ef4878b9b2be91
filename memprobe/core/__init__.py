"""The core: records and rules shared by every layer, in sub-packages by purpose: `records` (a result file's typed
records and their checks), `cards` (the GPU catalog, card names, memory sizes, overhead), `process` (child processes,
the wires between them, signals, time limits), `workload` (the registry, variants, strategies, option bounds),
`estimates` (the memory model, the knee, the plan, serving capacity), `text` (words and numbers for people) and `files`
(inputs read bounded, outputs checked). Imports no torch and nothing above it."""
