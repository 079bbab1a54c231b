"""The dashboard service: Ember's web UI and Ray's dashboard REST APIs (jobs, packages, state)
on one HTTP port (8265 by default). A driver-like service: it connects to the cluster through
`ember`'s public API and owns no state. See services/dashboard/README.md."""
