"""`python -m kairos.cli`: the same as the `kairos` command."""

from kairos.cli.app import main

main()
