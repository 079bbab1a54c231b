"""One OpenTelemetry span per trial (`tune.trial`), from its first start to its end, with events
for pauses, restarts and retries. Uses only the OpenTelemetry API: spans go wherever the
driver's tracer provider sends them (Ember sets it up from the OTEL_* variables), and cost
nothing when tracing is off."""
from __future__ import annotations

import contextlib
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from ..experiment.trial import Trial


class TrialSpans:
    """The open span of each trial that has started."""

    def __init__(self) -> None:
        self._tracer = trace.get_tracer("ember.tune")
        self._spans: dict[str, Any] = {}

    def start(self, trial: Trial, experiment: str, restored: bool) -> None:
        """Opens the trial's span (or records that it resumed)."""
        span = self._spans.get(trial.trial_id)
        if span is None:
            attrs: dict[str, str | float] = {"tune.trial_id": trial.trial_id, "tune.experiment": experiment,
                     "tune.trainable": trial.trainable_name, "tune.config": repr(trial.config)[:1000]}
            for k, v in trial.resources.items():
                attrs[f"tune.resources.{k}"] = v
            self._spans[trial.trial_id] = self._tracer.start_span("tune.trial", attributes=attrs)
            if restored:
                self.event(trial, "restored")
        else:
            span.add_event("resumed", {"tune.restored_from_checkpoint": restored})

    def active(self, trial: Trial) -> Any:
        """A context in which the trial's span is current: the actor calls submitted inside it
        (start, train) become its children, so a trial is one trace across driver and worker."""
        span = self._spans.get(trial.trial_id)
        if span is None:
            return contextlib.nullcontext()
        return trace.use_span(span, end_on_exit=False)

    def event(self, trial: Trial, name: str, **attrs: Any) -> None:
        """Adds an event to the trial's span."""
        span = self._spans.get(trial.trial_id)
        if span is not None:
            span.add_event(name, {k: str(v)[:2000] for k, v in attrs.items()})

    def end(self, trial: Trial, error: BaseException | None = None) -> None:
        """Ends the trial's span with its final status (and error)."""
        span = self._spans.pop(trial.trial_id, None)
        if span is None:
            return
        span.set_attribute("tune.status", trial.status)
        span.set_attribute("tune.iterations", trial.iteration)
        span.set_attribute("tune.num_failures", trial.num_failures)
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:500]))
        span.end()

    def end_all(self) -> None:
        """Ends every open span (the run ended with trials unfinished)."""
        for span in self._spans.values():
            span.set_attribute("tune.status", "INTERRUPTED")
            span.end()
        self._spans.clear()
