#!/usr/bin/env bash
# Run the tests that wait on signals, timers, Ray or Slurm N times in a row while a CPU-heavy job runs
# beside them (two busy processes, one per core), and print each run's failures (docs/testing.md).
#
#   bash scripts/flaky_check.sh 5                           # every such file, 5 runs
#   bash scripts/flaky_check.sh 5 tests/jobs/run/test_spool.py  # only these files
#   BUSY=0 bash scripts/flaky_check.sh 3                     # no busy processes: another job is the load
#
# Needs the Slurm cluster for the Slurm files (bash .ci/slurm.sh start; they skip without it).
# Exit 0 only when every run passed. Logs: results/flaky/run-<i>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(tests/jobs/run/test_scheduler.py tests/jobs/run/test_spool.py tests/jobs/run/test_stop_signals.py
         tests/jobs/cluster/test_preemption_relay.py tests/workflows/test_grid_bad_day.py tests/jobs/run/test_grid_e2e.py
         tests/workflows/test_full_grid_cli.py tests/streamgen/test_live.py
         tests/streamgen/results/test_results_dir.py tests/jobs/run/test_actor_placement.py
         tests/workflows/test_adapt_workflow.py tests/streamgen/demo/test_demo_server.py
         tests/streamgen/demo/test_demo_guard.py tests/streamgen/demo/test_demo_browser.py
         tests/jobs/cluster/test_slurm_cluster.py tests/jobs/cluster/test_slurm_rehearsal.py
         tests/jobs/cluster/test_slurm_partition.py)
fi
mkdir -p results/flaky
busy=()
for _ in $(seq 1 "${BUSY:-2}"); do python3 -c 'while True: pass' & busy+=($!); done
trap '[ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null' EXIT
failed=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  echo "run $i: start $(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg)"
  python3 -m pytest -q -p no:cacheprovider "${files[@]}" >"results/flaky/run-$i.log" 2>&1
  rc=$?
  echo "run $i: rc $rc in $(( $(date +%s) - start )) s: $(tail -1 "results/flaky/run-$i.log")"
  grep -E "^(FAILED|ERROR) " "results/flaky/run-$i.log" || true
  [ $rc -eq 0 ] || failed=$((failed + 1))
done
echo "$failed of $runs runs failed"
[ $failed -eq 0 ]
