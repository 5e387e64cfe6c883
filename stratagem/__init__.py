"""Stratagem."""
