"""The data model: samples, snapshots, verdicts, units and errors (no I/O, no threads)."""
