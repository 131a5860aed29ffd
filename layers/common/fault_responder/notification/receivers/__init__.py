"""One package per receiver kind."""
