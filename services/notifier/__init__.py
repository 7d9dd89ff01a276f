"""`kairos notifier`: tells each team what went wrong with its runs and changes, on its routes."""
