#!/usr/bin/env bash
# Build the DS-1000 interpreter: a virtualenv with the old data-science stack its references need.
#
#   bash scripts/ds1000_env.sh [VENV_DIR]        # default: .venv-ds1000 in the repository root
#   python -m streamgen.benchmarks check ds1000   # then finds VENV_DIR/bin/python (configs/benchmarks/ds1000.yaml)
#
# Why a separate interpreter: DS-1000's references use APIs removed from numpy 2 / pandas 2+ (np.NAN,
# DataFrame.append, ...). Those old pins must never go into the system Python (torch, transformers and
# datasets need the new ones). The venv sees the system site-packages (for torch, which PyPI only ships
# with multi-GB CUDA dependencies) but its own pins shadow them.
# Pins: data/ds1000/SOURCE.md ("old stack"), kept in ONE place: pyproject.toml's `ds1000`
# extra (read here; never install that extra into the main environment). tensorflow-cpu 2.15.1 is the
# newest release that still accepts numpy<2 on Python 3.11.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-ds1000}"
mapfile -t PINS < <(python3 -c "import sys, tomllib
extras = tomllib.load(open(sys.argv[1], 'rb'))['project']['optional-dependencies']
print('\n'.join(extras['ds1000']))" "$ROOT/pyproject.toml")
if [[ ! -x "$VENV/bin/python" ]]; then
  python3 -m venv --system-site-packages "$VENV"
fi
"$VENV/bin/python" -m pip install --disable-pip-version-check -q "${PINS[@]}"
"$VENV/bin/python" - <<'PY'
import numpy, pandas, scipy, sklearn, matplotlib
print("ds1000 env:", "numpy", numpy.__version__, "pandas", pandas.__version__, "scipy", scipy.__version__,
      "sklearn", sklearn.__version__, "matplotlib", matplotlib.__version__)
PY
