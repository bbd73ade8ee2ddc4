"""The physics: specs, knobs, init, inputs, attention, blocks, metrics and the Lab (one grid
point of one seed). Imports nothing from simlab.engine or simlab.studies (docs/design.md,
"Layout of the package")."""
