#!/usr/bin/env bash
# The adaptation chain's resume on the real SmolLM2, on a shortened smollm2-cpu recipe (issue 31):
# an uninterrupted run; a second run SIGTERMed once its first checkpoint exists, then the same command
# again; the two final adapters and curve.jsonl files must be byte-identical. Prints the rates it saw.
#   bash scripts/adapt_resume_check.sh [WORK_DIR]     (default /tmp/adapt-resume-check; ~4 min on 2 cores)
set -u
cd "$(dirname "$0")/.."
R=${1:-/tmp/adapt-resume-check}
rm -rf "$R" && mkdir -p "$R"
O=(adapt=smollm2-cpu stage=pairs stage=train source.limit=10 curve.heldout=2 pairs.max_new_tokens=96
   train.steps=6 train.save_every=2)
t0=$(date +%s)
python3 workflows/adapt.py "${O[@]}" output.dir="$R/ref" > "$R/ref.out" 2> "$R/ref.err"
echo "uninterrupted: rc=$? in $(( $(date +%s) - t0 )) s"
mkdir -p "$R/int" && cp -r "$R"/ref/teacher-* "$R/int/"  # the same teacher answers (its cache): only training differs
python3 workflows/adapt.py "${O[@]}" output.dir="$R/int" > "$R/int1.out" 2> "$R/int1.err" &
pid=$!
while [ ! -d "$R/int/checkpoints/step-000002" ] && kill -0 $pid 2>/dev/null; do sleep 0.5; done
kill -TERM $pid; wait $pid
echo "interrupted: rc=$? with checkpoints $(ls "$R/int/checkpoints" | tr '\n' ' ')"
tail -1 "$R/int1.err"
python3 workflows/adapt.py "${O[@]}" output.dir="$R/int" > "$R/int2.out" 2> "$R/int2.err"
echo "resumed: rc=$?"
grep -h "resuming from" "$R/int2.err" | sed 's/^[0-9-]* [0-9:,]* //'
status=0
cmp "$R/ref/checkpoints/step-000006/adapter.safetensors" "$R/int/checkpoints/step-000006/adapter.safetensors" \
  && echo "adapter: identical" || status=1
cmp "$R/ref/curve.jsonl" "$R/int/curve.jsonl" && echo "curve.jsonl: identical" || status=1
grep -h "teacher answers:\|step [0-9]*/6\|held-out draft agreement" "$R/ref.err" | sed 's/^[0-9-]* [0-9:,]* //'
exit $status
