"""Serve internals: pure decision cores (autoscaling, reconciliation, routing) and the actors."""
