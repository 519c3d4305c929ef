#!/usr/bin/env bash
# bench/samebehaviour.sh OLD [NEW]: the commands' behaviour compared between
# two revisions (NEW: the working tree), for a change that must not alter
# it (a refactor). Builds both revisions' binaries and compares, byte for
# byte: every command's and subcommand's --help, `plan -o json` of every
# shipped protocol and test protocol, and a set of error paths (bad flags,
# missing files, an invalid protocol, validate without its inputs). Prints
# one line per difference and a total; exit 1 when anything differs.
set -uo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench/samebehaviour.sh OLD-REV [NEW-REV]}
new=${2:-}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1; [ -n "$new" ] && git worktree remove --force "$work/new" >/dev/null 2>&1; rm -rf "$work"' EXIT
export CGO_CFLAGS='-O2 -Wno-deprecated-declarations'
build() { # build REV|"" DIR
  local src=.
  if [ -n "$1" ]; then
    git worktree add --detach "$work/$2" "$1" >/dev/null 2>&1 || { echo "cannot check out $1" >&2; exit 2; }
    src=$work/$2
  fi
  mkdir -p "$work/$2-bin"
  (cd "$src" && go build -o "$work/$2-bin/" ./cmd/controller ./cmd/ctlq ./cmd/loadgen ./cmd/standin) || { echo "build of ${1:-the working tree} failed" >&2; exit 2; }
}
build "$old" old
build "$new" new
# the outputs of one binary set, one file per probe, under $2
probe() {
  local bin=$1 out=$2 p n=0
  mkdir -p "$out"
  run() { local name=$1; shift; (cd "$work" && "$@" >"$out/$name.out" 2>"$out/$name.err"; echo "exit $?" >"$out/$name.rc"); }
  for c in controller ctlq loadgen standin; do
    run "$c.help" "$bin/$c" --help
    for sub in $("$bin/$c" --help 2>/dev/null | awk '/^Available Commands:/{f=1;next} /^$/{f=0} f{print $1}'); do
      run "$c.$sub.help" "$bin/$c" "$sub" --help
    done
  done
  for p in protocols/*.yaml protocols/testdata/*.yaml; do
    run "plan.$(basename "$p")" "$bin/controller" plan -f "$OLDPWD/$p" --check-inputs=false -o json
    run "plan-table.$(basename "$p")" "$bin/controller" plan -f "$OLDPWD/$p" --check-inputs=false
  done
  run err.unknown-flag "$bin/controller" plan --no-such-flag
  run err.no-file "$bin/controller" plan -f /nonexistent.yaml
  printf 'warden: 1\nname: x\nslots: [1\n' >"$work/bad.yaml"
  run err.bad-yaml "$bin/controller" plan -f "$work/bad.yaml"
  run err.resume-nodir "$bin/controller" --resume -d /nonexistent-campaign
  run err.status-nodir "$bin/ctlq" status -d /nonexistent-campaign
  run err.status-json "$bin/ctlq" status -d /nonexistent-campaign -o json
  run err.validate-layer1 "$bin/controller" validate layer1 --dir /nonexistent -o json
  run err.loadgen-run "$bin/loadgen" run --manifest /nonexistent.jsonl
}
probe "$work/old-bin" "$work/old-out"
probe "$work/new-bin" "$work/new-out"
diffs=0 total=0
for f in "$work/old-out"/*; do
  total=$((total + 1))
  g="$work/new-out/$(basename "$f")"
  # a binary's own path appears in some messages
  if ! cmp -s <(sed "s#$work/old-bin#BIN#g" "$f") <(sed "s#$work/new-bin#BIN#g" "$g" 2>/dev/null); then
    diffs=$((diffs + 1))
    echo "differs: $(basename "$f")"
    diff <(sed "s#$work/old-bin#BIN#g" "$f") <(sed "s#$work/new-bin#BIN#g" "$g" 2>/dev/null) | head -6 | sed 's/^/    /'
  fi
done
for g in "$work/new-out"/*; do
  [ -e "$work/old-out/$(basename "$g")" ] || { diffs=$((diffs + 1)); echo "new only: $(basename "$g")"; }
done
echo "$total probes of ${old} against ${new:-the working tree}: $diffs differ"
[ "$diffs" = 0 ]
