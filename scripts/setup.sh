#!/usr/bin/env bash
# Sets up rolltape in ./.venv, idempotently. Used by both README commands and by CI.
#   bash scripts/setup.sh          # runtime only
#   bash scripts/setup.sh --test   # plus the test tools (pytest, nbclient, playwright, chromium)
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    *) echo "setup.sh: unknown option '$arg'; use --test or nothing." >&2; exit 2 ;;
  esac
done

# Debian packages: Mesa for headless OpenGL (OSMesa, EGL); chromium for the report tests.
apt_pkgs=()
have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
have_lib libOSMesa.so || apt_pkgs+=(libosmesa6)
have_lib libEGL.so.1 || apt_pkgs+=(libegl1)
have_lib libOpenGL.so.0 || apt_pkgs+=(libopengl0)
[ -e /usr/lib/x86_64-linux-gnu/dri/swrast_dri.so ] || [ -e /usr/lib/aarch64-linux-gnu/dri/swrast_dri.so ] \
  || ls /usr/lib/*/dri/*swrast* >/dev/null 2>&1 || apt_pkgs+=(libgl1-mesa-dri)
if [ "$want_test" = 1 ] && ! command -v chromium >/dev/null; then apt_pkgs+=(chromium); fi
if [ ${#apt_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing Debian packages: ${apt_pkgs[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
  else
    echo "setup: headless rendering needs: sudo apt-get install -y --no-install-recommends ${apt_pkgs[*]}" >&2
  fi
fi

py=${PYTHON:-python3}
venv=${VENV:-.venv}  # CI also makes a second, plain one (scripts/check_plain_install.sh)
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
# torch first, pinned: its CPU wheel is on disk here, and an unpinned torch pulls a CUDA build.
"$venv/bin/python" -c "import torch" 2>/dev/null || "${pip[@]}" install "torch==2.13.0"
if [ "$want_test" = 1 ]; then
  "${pip[@]}" install -e ".[test,ray,server,suites,export,atari,zoo,mjwarp]"
else
  "${pip[@]}" install -e .
fi
# >>> lerobot, for the export tests: LeRobot 0.5+ needs Python 3.12 and pins torch, numpy
# and PyAV releases rolltape's own environment cannot share, so it gets a venv of its own
# (.venv-lerobot), in which the tests load the LeRobotDatasets rolltape writes.
if [ "$want_test" = 1 ]; then
  lr=${LEROBOT_VENV:-.venv-lerobot}
  if ! "$lr/bin/python" -c "import lerobot.datasets.lerobot_dataset" 2>/dev/null; then
    py312=""
    for cand in "${PYTHON312:-}" python3.12 "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12 \
                /usr/local/bin/python3.12 /usr/bin/python3.12; do
      if [ -n "$cand" ] && "$cand" -c "import sys; assert sys.version_info[:2] == (3, 12)" 2>/dev/null; then
        py312=$cand; break
      fi
    done
    if [ -z "$py312" ]; then
      echo "setup: the export tests need Python 3.12 for lerobot; set PYTHON312=/path/to/python3.12" >&2
      exit 1
    fi
    [ -x "$lr/bin/python" ] || "$py312" -m venv "$lr"
    lrpip=("$lr/bin/python" -m pip --disable-pip-version-check -q)
    # torch first, pinned to a release lerobot 0.6.1 accepts (< 2.12) whose wheel installs here.
    "${lrpip[@]}" install "torch==2.11.0" "torchvision==0.26.0"
    "${lrpip[@]}" install "lerobot[dataset]==0.6.1"
  fi
fi
# serve-policy in LeRobot's venv (the README's install: msgpack and websockets beside it)
if [ "$want_test" = 1 ]; then
  "${lr:-.venv-lerobot}/bin/python" -c "import msgpack, websockets" 2>/dev/null || \
    "${lr:-.venv-lerobot}/bin/python" -m pip --disable-pip-version-check -q install \
      "msgpack>=1,<2" "websockets>=13,<18"
fi
# gym-pusht in LeRobot's venv, for lerobot-eval side by side with rolltape eval (the version
# rolltape's suites extra pins; ~6 s here, packages added only, pip check clean)
if [ "$want_test" = 1 ]; then
  "${lr:-.venv-lerobot}/bin/python" -c "import gym_pusht" 2>/dev/null || \
    "${lr:-.venv-lerobot}/bin/python" -m pip --disable-pip-version-check -q install "gym-pusht==0.1.8"
fi
# <<< lerobot
# >>> metaworld, for the Meta-World suites' tests: metaworld 3.0.0 runs only on MuJoCo <= 3.3,
# so it gets a venv of its own (~/.local/share/rolltape/benchmarks/metaworld, ~35-85 s, ~480
# MB with the render side's PyAV), built as users build it; idempotent (rebuilt when its
# recipe changed).
# LeRobot's own Meta-World wrapper is checked against it in LeRobot's venv: its `metaworld`
# extra's pin plus the MuJoCo 3.3.7 it needs (adds packages only, ~12 s; pip check clean).
if [ "$want_test" = 1 ]; then
  "$venv/bin/rolltape" suites install metaworld
  "${lr:-.venv-lerobot}/bin/python" -c "import metaworld" 2>/dev/null || \
    "${lr:-.venv-lerobot}/bin/python" -m pip --disable-pip-version-check -q install \
      "metaworld==3.0.0" "mujoco==3.3.7"
fi
# <<< metaworld
# >>> aloha, for the ALOHA suite's tests: gym-aloha 0.1.5 needs dm-control 1.0.41 and its
# MuJoCo 3.8.1, so it gets a venv of its own (~/.local/share/rolltape/benchmarks/aloha, ~40 s,
# ~750 MB), built as users build it; idempotent.
if [ "$want_test" = 1 ]; then
  "$venv/bin/rolltape" suites install aloha
fi
# <<< aloha
# >>> openpi-client, for the served-policy test (openpi's own client against serve-policy):
# it pins numpy < 2, which rolltape's environment does not share, so it gets a small venv of
# its own (.venv-openpi, ~45 s). 0.1.2 imports typing_extensions without declaring it.
if [ "$want_test" = 1 ]; then
  op=${OPENPI_VENV:-.venv-openpi}
  if ! "$op/bin/python" -c "import openpi_client.websocket_client_policy" 2>/dev/null; then
    [ -x "$op/bin/python" ] || "$py" -m venv "$op"
    "$op/bin/python" -m pip --disable-pip-version-check -q install "openpi-client==0.1.2" \
      "typing_extensions>=4"
  fi
fi
# <<< openpi-client
# >>> viewer assets (rolltape view): mujoco-js and three, pinned by viewer/package-lock.json
if command -v npm >/dev/null && [ -f viewer/package-lock.json ]; then
  npm ci --prefix viewer --no-audit --no-fund --loglevel=error \
    || echo "setup: 'npm ci --prefix viewer' failed; the 3-D viewer needs it" >&2
fi
# <<< viewer assets
echo "setup: ready ($venv)"
