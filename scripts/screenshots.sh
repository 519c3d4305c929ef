#!/usr/bin/env bash
# The report screenshots in docs/screenshots/, made afresh (make screenshots):
# five campaigns on the stand-in server and fake GPUs, each one's report
# written (ctlq report), loaded in headless Chromium and photographed.
#
#   scripts/screenshots.sh campaigns   # run the campaigns into $SHOTS_DIR (default _shots) and write their reports
#                                      # (demo or phase3: one half of them)
#   scripts/screenshots.sh shoot [NAME...]  # photograph $SHOTS_DIR/*/report.html (or NAME's only) into docs/screenshots/
#   scripts/screenshots.sh             # both
#
# The campaigns (each in its own directory, made afresh):
#   demo               protocols/demo.yaml, run to its end
#   demo-stopped       the demo with config small expecting max_num_seqs=65 where the
#                      stand-in prints 64: stopped for review at small's first run
#   demo-crashed       the demo under a failpoints build of the controller (go build
#                      -tags failpoints), which kills itself at the fifth move to measuring;
#                      its report is written then, and a resume ends what it left
#   phase3             scripts/phase3_standin.py: the phase-3 protocol on stand-ins
#   phase3-gate-error  the same, its co-location gate's figure tolerance 0: stopped by the gate
# The phase-3 campaigns need a host with 8 CPUs or more (their eight slots'
# CPU masks are disjoint); on a smaller host they are not run, and it says so.
# shoot needs Chromium (Debian's chromium): a screenshot is the page at 1280
# pixels wide, as tall as the page (the page says its height once its script
# ran), at most 16,000 pixels.
set -euo pipefail
cd "$(dirname "$0")/.."
# go-nvml's cgo wrappers call NVML functions the header marks deprecated (as the Makefile says)
export CGO_CFLAGS=${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}
BIN=${BIN:-bin}
SHOTS_DIR=${SHOTS_DIR:-_shots}
OUT=docs/screenshots
what=${1:-all}

start() { # start NAME PROTOCOL [controller start flags]: a campaign afresh, in the foreground
  local name=$1 proto=$2; shift 2
  rm -rf "$SHOTS_DIR/$name"
  echo "screenshots: campaign $name" >&2
  "$BIN/controller" start -f "$proto" -d "$SHOTS_DIR/$name" --gpu-backend fake --foreground "$@" >"$SHOTS_DIR/$name.log" 2>&1 || true
  "$BIN/ctlq" status -d "$SHOTS_DIR/$name" >&2 || true
}

report() { "$BIN/ctlq" report -d "$SHOTS_DIR/$1" -o "$SHOTS_DIR/$1/report.html"; }

demo() {
  mkdir -p "$SHOTS_DIR"
  make -s demo-manifests >/dev/null
  start demo protocols/demo.yaml
  report demo
  # the demo's workdir (the repository root, relative to the protocol file) made absolute
  sed -e "s/pattern: 'max_num_seqs=64\\\\b'/pattern: 'max_num_seqs=65\\\\b'/" -e "s|^workdir: \\.\\. |workdir: $PWD |" \
    protocols/demo.yaml >"$SHOTS_DIR/demo-stopped.yaml"
  if ! grep -q "max_num_seqs=65" "$SHOTS_DIR/demo-stopped.yaml" || ! grep -q "^workdir: $PWD " "$SHOTS_DIR/demo-stopped.yaml"; then
    echo "screenshots: the demo-stopped protocol did not change as meant; protocols/demo.yaml's expectation or workdir moved" >&2; exit 1
  fi
  start demo-stopped "$SHOTS_DIR/demo-stopped.yaml"
  report demo-stopped
  go build -tags failpoints -o "$SHOTS_DIR/controller-failpoints" ./cmd/controller
  rm -rf "$SHOTS_DIR/demo-crashed"
  echo "screenshots: campaign demo-crashed" >&2
  WARDEN_FAILPOINT=after-transition:measuring@5 "$SHOTS_DIR/controller-failpoints" start -f protocols/demo.yaml -d "$SHOTS_DIR/demo-crashed" \
    --gpu-backend fake --foreground >"$SHOTS_DIR/demo-crashed.log" 2>&1 || true
  report demo-crashed
  "$BIN/controller" resume -d "$SHOTS_DIR/demo-crashed" --foreground >>"$SHOTS_DIR/demo-crashed.log" 2>&1 || true
}

phase3() {
  mkdir -p "$SHOTS_DIR"
  if [ "$(nproc)" -lt 8 ]; then
    echo "screenshots: the phase-3 campaigns need 8 CPUs (eight slots with disjoint CPU masks); this host has $(nproc): not run" >&2
    return 1
  fi
  python3 scripts/phase3_standin.py "$SHOTS_DIR/phase3.yaml" "$SHOTS_DIR/manifests"
  start phase3 "$SHOTS_DIR/phase3.yaml"
  report phase3
  python3 scripts/phase3_standin.py --gate-error "$SHOTS_DIR/phase3-gate-error.yaml" "$SHOTS_DIR/manifests"
  start phase3-gate-error "$SHOTS_DIR/phase3-gate-error.yaml"
  report phase3-gate-error
}

shoot() {
  local browser
  browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome) || {
    echo "screenshots: no chromium (apt-get install chromium)" >&2; exit 1; }
  local profile
  profile=$(mktemp -d)
  trap 'rm -rf "$profile"' RETURN
  local flags=(--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update --disable-sync
    --no-first-run --hide-scrollbars --user-data-dir="$profile")
  local name png page height only=" $* "
  for pair in demo:report-demo demo-stopped:report-stopped-for-review demo-crashed:report-crashed \
    phase3:report-phase3-standin phase3-gate-error:report-phase3-standin-gate-error; do
    name=${pair%%:*} png=$OUT/${pair#*:}.png page=$SHOTS_DIR/${pair%%:*}/report.html
    if [ $# -gt 0 ] && [[ $only != *" $name "* ]]; then continue; fi
    if [ ! -f "$page" ]; then
      echo "screenshots: no $page (scripts/screenshots.sh campaigns): $png not made" >&2; exit 1
    fi
    page=$(realpath "$page")
    height=$("$browser" "${flags[@]}" --window-size=1280,1000 --dump-dom "file://$page" 2>/dev/null | sed -n 's/.*data-height="\([0-9]*\)".*/\1/p' | head -1)
    if [ -z "$height" ]; then
      echo "screenshots: $page did not say its height (its script did not run)" >&2; exit 1
    fi
    [ "$height" -gt 16000 ] && height=16000
    "$browser" "${flags[@]}" --window-size=1280,"$height" --screenshot="$png" "file://$page" >/dev/null 2>&1
    echo "screenshots: $png (1280x$height)" >&2
  done
}

case $what in
  demo) demo ;;
  phase3) phase3 ;;
  campaigns) demo; phase3 ;;
  shoot) shift; shoot "$@" ;;
  all) demo; phase3; shoot ;;
  *) echo "usage: scripts/screenshots.sh [campaigns|demo|phase3|shoot|all]" >&2; exit 2 ;;
esac
