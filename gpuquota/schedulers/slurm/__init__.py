"""The Slurm backend (docs/slurm.md)."""
