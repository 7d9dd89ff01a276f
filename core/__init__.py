"""The pure domain of Kairos: no I/O, every function takes `now` explicitly."""
