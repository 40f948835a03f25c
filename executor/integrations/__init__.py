"""Glue for agent frameworks, each importing its framework only when used (client side only)."""
