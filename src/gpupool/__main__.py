"""``python -m gpupool`` runs the command-line interface."""

from gpupool.cli import main

main()
