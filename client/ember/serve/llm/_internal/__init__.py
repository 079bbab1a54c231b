"""Ember Serve LLM internals: engines, their batch scheduler, the OpenAI protocol and the app."""
