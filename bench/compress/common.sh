# Shared by the compress benchmarks (sourced from the project root): logging, and packages trained
# and quantized once into $out and kept between runs. They expect $bin (a strato binary), $out
# and $threads.

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
have() { [[ -f $1/strato-model.json ]]; }

# train NAME CONFIG EPOCHS [--set ...]: a float package at $out/NAME/model (kept between runs).
train() {
  local name=$1 config=$2 epochs=$3
  shift 3
  have "$out/$name/model" && { log "reusing $out/$name/model"; return; }
  log "training $name ($epochs epochs)"
  "$bin" --quiet train "$config" --set run.dir="$out" --set run.name="$name" --set train.epochs="$epochs" \
    --set run.threads="$threads" --no-report --resume "$@" >/dev/null
}

# quantize DIR: the INT8 package DIR-int8 (strato compress quantize's default output).
quantize() { "$bin" --quiet compress quantize --model "$1" --threads "$threads" --no-eval >/dev/null; }
