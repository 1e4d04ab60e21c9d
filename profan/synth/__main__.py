"""``python -m profan.synth OUT --ranks 8 …``: write a synthetic cluster (see `profan.synth`)."""

from profan.synth import main

main()
