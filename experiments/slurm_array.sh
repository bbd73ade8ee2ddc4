#!/usr/bin/env bash
# One task of a Slurm job array computing its share of a simlab sweep (docs/config.md,
# "Running on many machines"):
#   sbatch --array=0-15 experiments/slurm_array.sh CONFIG.toml OUT_DIR
# Each task takes worker SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT
# (simlab reads them itself); OUT_DIR must be on a shared file system. Afterwards
#   simlab merge OUT_DIR
# computes whatever a failed task left and writes results.npz + meta.json.
#SBATCH --job-name=simlab-sweep
#SBATCH --cpus-per-task=2
#SBATCH --time=02:00:00
set -euo pipefail
config=${1:?usage: slurm_array.sh CONFIG.toml OUT_DIR}
out=${2:?usage: slurm_array.sh CONFIG.toml OUT_DIR}
exec simlab sweep "$config" --out "$out" --quiet
