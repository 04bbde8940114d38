"""Jinja2 templates for tracekit's reports, shipped inside the wheel."""

from importlib.resources import files

TEMPLATES = files(__name__) / "templates"
