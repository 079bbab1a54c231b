"""Tools built on Ember's public API and the core's doors, above the core (`ember._private`
imports nothing from here):

- cli/: the `ember` command line (one module per command group);
- job_manager: the JobSupervisor actor and job records behind `ember job` and the dashboard;
  job_submission: the `ember job` commands;
- perf (+ perf_actors): the engine of `ember microbenchmark`, Ray's workloads for Ember or Ray.
"""
