"""The fuzz run of issue 15: generated records on every consumed topic, generated CLI arguments.

`python -m bench.fuzz [--seed N]` starts a local broker, a real ticker and a real executor,
publishes a seeded storm of valid and hostile records, then checks that both processes survived
and still serve, that every hostile record was dead-lettered or skipped with its reason, and
that every valid schedule fired and ran; then it runs generated `kairos` command lines. The
figures go to `bench/results/fuzz.json` and `FUZZ_SECTION.md`.
"""
