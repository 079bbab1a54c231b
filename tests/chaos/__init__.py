"""The chaos suite (issue 19): faults on the compose cluster under a mixed workload."""
