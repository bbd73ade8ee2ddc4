"""What uses the lab: the reproduction (reproduce), the theory checks (check_theory), the
training study (train_dynamics) and the benchmark (bench) (docs/design.md, "Layout of the
package")."""
