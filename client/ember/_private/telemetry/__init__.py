"""Telemetry: what the core reports about its tasks.

- task_events: every task's state transitions, batched to the GCS off the hot path (Ray's
  TaskEventBuffer), and the spans derived from them; used as a module (`task_events.submitted`,
  `task_events.replied`, ...);
- ports: EventsCore, what the reporter needs of the core worker (a typing Protocol).
"""
