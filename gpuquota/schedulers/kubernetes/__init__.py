"""The Kubernetes backend: reservations as Kueue quotas, admission rules, exact GPUs (DRA)."""
