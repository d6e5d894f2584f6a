"""`python -m dataflow.cli ARGS`: what the installed `dataflow` entry point runs."""
import sys

from .main import main

sys.exit(main())
