#!/usr/bin/env bash
# Measures the simulation's power over the patches of this folder: each
# patch is applied to this commit in a scratch worktree, and seeds are
# played from SIM_FROM (0) until the first one that breaks an invariant,
# for at most BUDGET (10m) of wall-clock time. Prints one line per patch:
# its name, the seeds played, and the first violation (or "not found").
#
#   sim/mutations/measure.sh                       # every patch
#   sim/mutations/measure.sh sim/mutations/55-*.patch
#
# Each line is also filed in sim/mutations/measured.tsv (a patch's line
# replaced), which docs/RELIABILITY.md's table is made from: the patch,
# seeds played, the first violation or "-", the commit and the date.
#
# A patch may name the simulation's flags in a line `Sim flags: ...` of
# its header (a store mode, other faults), and its environment in a line
# `Sim env: NAME=VALUE ...`. The worktree builds into
# MUTANT_TARGET (target/mutant): the first build compiles every
# dependency, later ones only the host and the simulation.
set -euo pipefail

here=$(cd "$(dirname "$0")/../.." && pwd)
budget=${BUDGET:-10m}
from=${SIM_FROM:-0}
target=${MUTANT_TARGET:-$here/target/mutant}
tree=$(mktemp -d "${TMPDIR:-/tmp}/stepstone-mutant.XXXXXX")
trap 'git -C "$here" worktree remove --force "$tree" >/dev/null 2>&1 || true' EXIT
git -C "$here" worktree add --detach --quiet "$tree" HEAD
base=$(git -C "$tree" rev-parse --short HEAD)

patches=("$@")
[ ${#patches[@]} -gt 0 ] || patches=("$here"/sim/mutations/*.patch)

for patch in "${patches[@]}"; do
    patch=$(cd "$(dirname "$patch")" && pwd)/$(basename "$patch")
    name=$(basename "$patch" .patch)
    git -C "$tree" checkout --quiet --force HEAD -- .
    if ! git -C "$tree" apply "$patch"; then
        echo "$name: does not apply to $base"
        continue
    fi
    read -r -a flags <<<"$(sed -n 's/^Sim flags: //p' "$patch")"
    read -r -a env <<<"$(sed -n 's/^Sim env: //p' "$patch")"
    (cd "$tree" && CARGO_TARGET_DIR="$target" cargo build --quiet -p stepstone-sim 2>/dev/null)
    summary=$(cd "$here" && env "${env[@]}" "$target/debug/stepstone-sim" --from "$from" --seeds 1000000 --budget "$budget" \
        --until-found "${flags[@]}" | grep -E '^(seed [0-9]+: |sim: )' || true)
    found=$(grep -m1 -E '^seed [0-9]+: ' <<<"$summary" || echo "not found")
    played=$(sed -n 's/^sim: seeds [0-9]*\.\.[0-9]* (\([0-9]*\) played).*/\1/p' <<<"$summary")
    echo "$name: ${played:-0} seeds played from $from; ${found}"
    measured="$here/sim/mutations/measured.tsv"
    touch "$measured"
    { grep -v "^$name	" "$measured" || true
      printf '%s\t%s\t%s\t%s\t%s\n' "$name" "${played:-0}" "${found/not found/-}" \
          "$base" "$(date -u +%Y-%m-%d)"
    } | sort > "$measured.new"
    mv "$measured.new" "$measured"
done
