"""Long-running Kairos processes: thin loops around `kairos.core` and `kairos.streams`."""
