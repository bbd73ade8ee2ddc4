"""The sweep machinery: config, grid, the plain sweep and the composite one (grown, refined),
chunk store, on-disk records, results, compile cache. It runs any lab with the Lab protocol
(simlab.core.lab.LabProtocol: seed_state, point) and builds no block itself; of the physics it
knows only what a config holds: the [block] and [inputs] specs (simlab.core.spec) and the knob
registry (simlab.core.knobs) it validates, simlab.core.lab.Lab, the default lab, and the weight
source (simlab.checkpoints.source, which resolves a [checkpoint] table into the Weights a Lab
runs; simlab.checkpoints.checkpoint.Weights) (tests/test_layers.py checks these are its only
imports from outside; docs/design.md, "Layout of the package")."""
