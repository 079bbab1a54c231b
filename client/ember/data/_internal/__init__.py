"""Ember Data internals: the plan, the executor, the datasources and the pure policies."""
