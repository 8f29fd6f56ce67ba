#!/usr/bin/env bash
# Runs one fuzz target for SECONDS, then files its result for the
# reliability report in target/fuzz-results/fuzz-TARGET.json. Fails (after
# filing the result) when libFuzzer found an input that breaks the host: it
# is then in fuzz/artifacts/TARGET/; fix the bug and keep the input under
# fuzz/regressions/TARGET/ so `make test` replays it.
#
# Usage: mk/fuzz-target.sh TARGET SECONDS
set -uo pipefail
target=$1
seconds=$2
corpus=fuzz/corpus/$target
seeds=(fuzz/regressions/"$target")
# Uploads start from the example guests: valid components to mutate.
[ "$target" = component_upload ] && seeds+=(target/guests)
mkdir -p "$corpus" target/fuzz-results
log=target/fuzz-results/fuzz-$target.log
echo "== fuzzing $target for ${seconds}s (log: $log)"
RUSTC_BOOTSTRAP=1 "${CARGO:-cargo}" fuzz run --sanitizer none "$target" "$corpus" "${seeds[@]}" -- \
	-max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1
status=$?
executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
if [ "$status" -eq 0 ]; then
	outcome="no panic, hang, server error or unexplained refusal in ${executions:-0} executions over ${seconds} s"
else
	artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
	outcome="failed (exit $status): ${artifact:-see $log}"
fi
printf '{\n  "suite": "fuzz",\n  "fault": "%s: arbitrary input",\n  "trials": %s,\n  "outcome": "%s",\n  "lost": 0\n}\n' \
	"$target" "${executions:-0}" "$outcome" >"target/fuzz-results/fuzz-$target.json"
echo "   $outcome"
[ "$status" -eq 0 ] || { tail -40 "$log" >&2; exit 1; }
