"""``python -m analysis RESULTS_DIR [--compare OTHER_DIR]`` — the same as ``python -m analysis.report``."""

from analysis.report import main

raise SystemExit(main())
