"""Chain: preprocessors applied in sequence, each fitted on the output of the ones before."""
from __future__ import annotations

from typing import Any

from ._base import Preprocessor


class Chain(Preprocessor):
    """Preprocessors applied one after another; fitting fits each on the output of the
    previous ones."""

    def __init__(self, *preprocessors: Preprocessor) -> None:
        super().__init__()
        self.preprocessors = list(preprocessors)

    def fit_status(self) -> Preprocessor.FitStatus:
        """FITTED once every fittable part is, PARTIALLY_FITTED in between."""
        statuses = [p.fit_status() for p in self.preprocessors]
        fittable = [s for s in statuses if s is not Preprocessor.FitStatus.NOT_FITTABLE]
        if not fittable:
            return Preprocessor.FitStatus.NOT_FITTABLE
        done = [s for s in fittable if s is Preprocessor.FitStatus.FITTED]
        if len(done) == len(fittable):
            return Preprocessor.FitStatus.FITTED
        return Preprocessor.FitStatus.PARTIALLY_FITTED if done else \
            Preprocessor.FitStatus.NOT_FITTED

    def fit(self, ds: Any) -> Preprocessor:
        """Fits every part in turn (each on the previous parts' output)."""
        for p in self.preprocessors[:-1]:
            ds = p.fit_transform(ds)
        if self.preprocessors:
            self.preprocessors[-1].fit(ds)
        return self

    def fit_transform(self, ds: Any, **kwargs: Any) -> Any:
        """Fits and applies every part in turn."""
        for p in self.preprocessors:
            ds = p.fit_transform(ds, **kwargs)
        return ds

    def transform(self, ds: Any, **kwargs: Any) -> Any:
        """Applies every part in turn."""
        self._check_fitted()
        for p in self.preprocessors:
            ds = p.transform(ds, **kwargs)
        return ds

    def transform_batch(self, data: Any) -> Any:
        """Applies every part to one batch."""
        for p in self.preprocessors:
            data = p.transform_batch(data)
        return data

    def __repr__(self) -> str:
        return f"Chain({', '.join(repr(p) for p in self.preprocessors)})"
