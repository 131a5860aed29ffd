"""One package per receiver kind (docs/architecture.md)."""
