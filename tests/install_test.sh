#!/usr/bin/env bash
# keel as a library (issue 18): `cmake --install` into a prefix that is then moved (the package
# is relocatable), the installed header set, keel.pc, and each examples/ project configured,
# built and run from outside the tree against the moved install.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -u
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/check.sh"
export KEEL_COMPILE_CACHE_DIR="$tmp/cache"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)

check install 0 'Installing: .*/include/keel/keel.h' -- cmake --install "$build" --prefix "$tmp/stage"
mv "$tmp/stage" "$tmp/p"
p=$tmp/p
check umbrella 0 'keel.h' -- ls "$p/include/keel/keel.h"
check version-header 0 'KEEL_VERSION "[0-9]+\.[0-9]+\.[0-9]+"' -- cat "$p/include/keel/keel_version.h"
# What keel.h does not reach stays out: the code generator, the corpus reader, the CLI.
check internal-headers-left-out 0 '^0$' -- sh -c "ls '$p/include/keel/backend/cpu' '$p/include/keel/data' '$p/include/keel/tools' 2>/dev/null | grep -c '\.h$' || true"
check profiles 0 'train.toml' -- ls "$p/share/keel/profiles"
check libraries 0 'libkeel_train.a' -- ls "$p/lib"
check binary-version 0 "^keel $(sed -n 's/^project(keel VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt") \(revision " -- "$p/bin/keel" --version
check binary-formats 0 'formats read and written: checkpoint 1, cache layout v1' -- "$p/bin/keel" --version
# The installed binary reads the profiles installed beside it, not the source tree's.
check binary-profiles 0 "$p/share/keel/profiles/train.toml" -- "$p/bin/keel" --profile train policy show

# The examples' own code at -O0 (an empty build type): their time is in the installed keel, and
# at -O3 each took 9 s to compile.
configure() {  # configure NAME: examples/NAME against the moved install
  cmake -S "$src/examples/$1" -B "$tmp/ex-$1" "${gen[@]}" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_BUILD_TYPE= &&
    cmake --build "$tmp/ex-$1"
}

# custom_model: trains, checkpoints, resumes exactly, writes a record.
check custom-build 0 '' -- configure custom_model
cm=$tmp/ex-custom_model/custom_model
check custom-train 0 'final loss 0\.0[0-9]+ after step 150' -- "$cm" "$tmp/cm" 150
check custom-record 0 '"train_step_programs": 1' -- cat "$tmp/cm/record.json"
check custom-record-policy 0 '"origin": "env KEEL_COMPILE_CACHE_DIR"' -- cat "$tmp/cm/record.json"
check custom-half 0 'checkpoint .*/step-70' -- "$cm" "$tmp/cm2" 70
resumed=$("$cm" "$tmp/cm2" 150 2>&1)
check custom-resume 0 'resumed from .*/step-70 at step 70' -- echo "$resumed"
want=$(grep -E '^(loss over|final loss)' <<<"$("$cm" "$tmp/cm3" 150)")
got=$(grep -E '^(loss over|final loss)' <<<"$resumed")
check custom-resume-exact 0 '^same$' -- bash -c '[[ "$1" == "$2" && -n "$1" ]] && echo same || printf "%s\n---\n%s\n" "$1" "$2"' _ "$want" "$got"
check custom-nothing-to-do 0 'already at step 150; nothing to train' -- "$cm" "$tmp/cm2" 100
check custom-bad-set 1 '^\[policy\] --set nope.key=1: ' -- "$cm" "$tmp/cm4" 10 --set nope.key=1

# shape_guard: the strict error names the line defining the function; buckets fix it.
check guard-build 0 '' -- configure shape_guard
line=$(grep -n 'keel::compile("score"' "$src/examples/shape_guard/main.cpp" | cut -d: -f1)
check guard-strict 0 "new program for 'score' \(defined at .*examples/shape_guard/main.cpp:$line\) at its call 3: input 0 \(argument 0\) shape f32\[4,64\] -> f32\[4,57\]" -- "$tmp/ex-shape_guard/shape_guard"
check guard-fix-named 0 'pad lengths that vary to a few buckets \(keel::bucketed\)' -- "$tmp/ex-shape_guard/shape_guard"
check guard-buckets 0 'bucketed: 9 calls, [1-4] programs' -- "$tmp/ex-shape_guard/shape_guard"
check guard-warn-runs-on 3 'score: length 40 ran' -- "$tmp/ex-shape_guard/shape_guard" --profile dev

# pkg-config: the same example built with a plain compiler command line.
export PKG_CONFIG_PATH=$p/lib/pkgconfig
check pc-version 0 '^[0-9]+\.[0-9]+\.[0-9]+$' -- pkg-config --modversion keel
check pc-build 0 '' -- sh -c "c++ '$src/examples/shape_guard/main.cpp' -o '$tmp/sg-pc' \$(pkg-config --cflags --libs keel)"
check pc-run 0 'bucketed: 9 calls' -- "$tmp/sg-pc"

# export_hf: a GPT-2 checkpoint (gpt2-s's flavour, two layers 64 wide: its compiles took most of
# this test at full size) to Hugging Face GPT-2 and back, exactly.
check hf-build 0 '' -- configure export_hf
hf=$tmp/ex-export_hf/export_hf
echo '{"name": "gpt2-s", "layers": 2, "width": 64, "heads": 2, "seq": 64, "batch": 2}' >"$tmp/gpt2.json"
check hf-train 0 'checkpoint .*/step-1' -- "$p/bin/keel" train --config "$tmp/gpt2.json" --steps 1 --eval-batches 1 --sample-bytes 1 --run-dir "$tmp/g"
check hf-export 0 'wrote .*/hf \(config.json, model.safetensors: 28 tensors of step 1\)' -- "$hf" to-hf "$tmp/g" "$tmp/hf"
check hf-import 0 'wrote .*/back/checkpoints/step-0' -- "$hf" from-hf "$tmp/hf" "$tmp/back"
check hf-reexport 0 'wrote' -- "$hf" to-hf "$tmp/back" "$tmp/hf2"
check hf-model-exact 0 '' -- cmp "$tmp/g/checkpoints/step-1/model.safetensors" "$tmp/back/checkpoints/step-0/model.safetensors"
check hf-files-exact 0 '' -- sh -c "cmp '$tmp/hf/model.safetensors' '$tmp/hf2/model.safetensors' && cmp '$tmp/hf/config.json' '$tmp/hf2/config.json'"
header() {  # the safetensors JSON header of $1
  local n
  n=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
  tail -c +9 "$1" | head -c "$n"
}
check hf-config 0 '^gpt2 GPT2LMHeadModel 64 2 2 64 256 gelu_new true null$' -- \
  sh -c "jq -r '[.model_type, .architectures[0], .n_embd, .n_layer, .n_head, .n_positions, .vocab_size, .activation_function, .tie_word_embeddings, .n_inner] | join(\" \")' '$tmp/hf/config.json' | sed 's/ $/ null/'"
check hf-conv1d-layout 0 '^\[64,192\] \[64,64\] \[64,256\] \[256,64\] \[256,64\] \[64,64\]$' -- \
  bash -c 'jq -c "[.\"h.0.attn.c_attn.weight\".shape, .\"h.0.attn.c_proj.weight\".shape, .\"h.0.mlp.c_fc.weight\".shape, .\"h.0.mlp.c_proj.weight\".shape, .\"wte.weight\".shape, .\"wpe.weight\".shape] | map(tostring) | join(\" \")" -r <<<"$1"' _ "$(header "$tmp/hf/model.safetensors")"
check hf-tied-head-once 0 '^0$' -- bash -c 'grep -c lm_head <<<"$1" || true' _ "$(header "$tmp/hf/model.safetensors")"
check hf-sample-same 0 '^same$' -- bash -c '[[ "$("$1" sample --checkpoint "$2" --bytes 16)" == "$("$1" sample --checkpoint "$3" --bytes 16)" ]] && echo same' _ "$p/bin/keel" "$tmp/g" "$tmp/back"
# What is not GPT-2 is refused in one line.
mkdir "$tmp/codes" && cp -r "$tmp/g/checkpoints/step-1" "$tmp/codes/"
jq '.config = {"name": "code-s"}' "$tmp/g/checkpoints/step-1/trainer.json" >"$tmp/codes/step-1/trainer.json"
check hf-not-gpt2 1 "^\[export_hf\] .*/codes/step-1/trainer.json: model 'code-s' is not GPT-2 \(norm rmsnorm" -- "$hf" to-hf "$tmp/codes/step-1" "$tmp/x"
# ... and so is a GPT-2 with Mamba-2 or sparse attention layers (its layers are not GPT-2's).
mkdir "$tmp/mamba" && cp -r "$tmp/g/checkpoints/step-1" "$tmp/mamba/"
jq '.config.mamba_layers = [0]' "$tmp/g/checkpoints/step-1/trainer.json" >"$tmp/mamba/step-1/trainer.json"
check hf-not-gpt2-mamba 1 "^\[export_hf\] .*/mamba/step-1/trainer.json: model 'gpt2-s' is not GPT-2" -- "$hf" to-hf "$tmp/mamba/step-1" "$tmp/x"
jq '.config.sparse_attention_layers = [0] | .config.sparse_attention = {"keys": 8}' \
  "$tmp/g/checkpoints/step-1/trainer.json" >"$tmp/mamba/step-1/trainer.json"
check hf-not-gpt2-sparse 1 "^\[export_hf\] .*/mamba/step-1/trainer.json: model 'gpt2-s' is not GPT-2" -- "$hf" to-hf "$tmp/mamba/step-1" "$tmp/x"
mkdir "$tmp/relu" && cp "$tmp/hf/model.safetensors" "$tmp/relu/" && jq '.activation_function = "relu"' "$tmp/hf/config.json" >"$tmp/relu/config.json"
check hf-bad-activation 1 '^\[export_hf\] .*/relu/config.json: "activation_function" must be "gelu_new"$' -- "$hf" from-hf "$tmp/relu" "$tmp/x"

# Versions: a checkpoint from a newer keel is refused in one line saying what reads it.
mkdir "$tmp/newer" && cp -r "$tmp/g/checkpoints/step-1" "$tmp/newer/"
jq '.format = 2' "$tmp/g/checkpoints/step-1/trainer.json" >"$tmp/newer/step-1/trainer.json"
check newer-checkpoint 2 'trainer.json: field "format" is format 2, written by a newer keel; this keel \([0-9.]+\) reads format 1 and older' -- "$p/bin/keel" sample --checkpoint "$tmp/newer/step-1"
check checkpoint-format-written 0 '^1$' -- jq '.format' "$tmp/g/checkpoints/step-1/trainer.json"
check record-format-written 0 '^1$' -- jq '.format' "$tmp/g/record.json"
mkdir -p "$KEEL_COMPILE_CACHE_DIR/v2"
check newer-cache-layout 0 "^\[cache\] $KEEL_COMPILE_CACHE_DIR also holds layout v2, written by a newer keel; this keel \([0-9.]+\) reads layout v1" -- "$p/bin/keel" cache stats

echo "install_test: $passes passed, $fails failed"
[[ $fails -eq 0 ]]
