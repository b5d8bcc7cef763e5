"""python -m attnlab.exercises (see attnlab.exercises.command)."""
import sys

from .command import main

sys.exit(main())
