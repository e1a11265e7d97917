"""Screens of the racer-tui app, one a module."""
