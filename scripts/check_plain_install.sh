#!/usr/bin/env bash
# The CLI as README command 1 installs it: no test extras (so no Ray, and no `click` beside
# typer's own). A missing dependency, or an error path that needs one, fails here, in CI.
# Every usage error must be exit 2 with one line on stderr and no traceback.
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV=${VENV:-.venv-plain}
bash scripts/setup.sh >/dev/null
rt="$VENV/bin/rolltape"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0

# expect STATUS MAX_STDERR_LINES COMMAND...
expect() {
  local want=$1 max_lines=$2; shift 2
  local got=0
  checks=$((checks + 1))
  "$@" >"$tmp/out" 2>"$tmp/err" || got=$?
  local lines
  lines=$(grep -c . "$tmp/err" || true)
  if [ "$got" != "$want" ] || [ "$lines" -gt "$max_lines" ] || grep -q Traceback "$tmp/err"; then
    echo "plain install: FAILED (exit $got, want $want; $lines stderr lines): ${*:2}" >&2
    sed 's/^/    /' "$tmp/err" | head -20 >&2
    failures=$((failures + 1))
  fi
}

expect 0 0 "$rt" --version
expect 0 0 "$rt" --help
expect 0 0 "$rt" eval -h
expect 2 1 "$rt"
expect 2 1 "$rt" --bogus
expect 2 1 "$rt" frobnicate
expect 2 1 "$rt" eval
expect 2 1 "$rt" eval CartPole-v1 --episodes abc
expect 2 1 "$rt" eval CartPole-v1 --bogus
expect 2 1 "$rt" eval CartPole-v1 --episodes 0
expect 2 1 "$rt" eval NoSuchEnv-v0
expect 2 1 "$rt" render "$tmp/missing.npz"
# The env server is an extra (rolltape[server]): without it, one sentence saying so.
expect 2 1 "$rt" serve CartPole-v1
expect 2 1 "$rt" eval tcp://127.0.0.1:7450/CartPole-v1 --episodes 1 --out "$tmp/served"
expect 0 9 "$rt" eval CartPole-v1 --episodes 2 --video 1 --format gif --out "$tmp/run" --quiet
expect 0 0 "$rt" verify "$tmp"/run/tapes/policy-0000.npz --quiet
expect 0 9 "$rt" render "$tmp"/run/tapes/policy-0001.npz --out "$tmp/one.gif" --quiet
[ -s "$tmp/one.gif" ] || { echo "plain install: render wrote no GIF" >&2; failures=$((failures + 1)); }
# Suites: the benchmark packages are an extra; without it `suites` says what to install and
# a suite that needs them is one sentence naming the extra.
expect 0 0 "$rt" suites
grep -q "rolltape\[suites\]" "$tmp/out" || { echo "plain install: 'rolltape suites' names no extra" >&2; failures=$((failures + 1)); }
expect 2 1 "$rt" eval --suite pusht --out "$tmp/pusht"
grep -q "rolltape\[suites\]" "$tmp/err" || { echo "plain install: --suite pusht names no extra" >&2; failures=$((failures + 1)); }
expect 0 9 "$rt" eval --suite classic --tasks cartpole -n 2 --max-episode-steps 20 --out "$tmp/classic" --quiet
# Atari (ale-py) and datasets (minari, pyarrow) are extras too: one sentence naming each.
expect 2 1 "$rt" eval ALE/Pong-v5 --episodes 1 --out "$tmp/ale"
grep -q "rolltape\[atari\]" "$tmp/err" || { echo "plain install: ALE names no extra" >&2; failures=$((failures + 1)); }
expect 2 1 "$rt" export "$tmp/run" --to minari --id rolltape/plain-v0
grep -q "rolltape\[export\]" "$tmp/err" || { echo "plain install: export names no extra" >&2; failures=$((failures + 1)); }
# MuJoCo Warp is an extra (rolltape[mjwarp]): pass 1 on it, and drawing on it, say so.
expect 2 1 "$rt" eval HalfCheetah-v5 --simulator mjwarp --episodes 1 --out "$tmp/mjwarp"
grep -q "rolltape\[mjwarp\]" "$tmp/err" || { echo "plain install: --simulator mjwarp names no extra" >&2; failures=$((failures + 1)); }
[ ! -e "$tmp/mjwarp" ] || { echo "plain install: a refused --simulator mjwarp left a run" >&2; failures=$((failures + 1)); }
expect 2 1 "$rt" render "$tmp"/run/tapes/policy-0000.npz --renderer mjwarp --out "$tmp/batch/"
# Anytime-valid stopping needs numpy only.
expect 0 9 "$rt" eval CartPole-v1 --until 'width<400' --max-episodes 20 --return-bounds 0,500 --out "$tmp/until" --quiet

if [ "$failures" -gt 0 ]; then
  echo "plain install: $failures check(s) failed" >&2
  exit 1
fi
echo "plain install: $checks CLI checks passed"
