"""Directory put first on the workload's PYTHONPATH so that its ``sitecustomize`` runs."""
