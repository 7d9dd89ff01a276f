"""The `kairos` command line."""
