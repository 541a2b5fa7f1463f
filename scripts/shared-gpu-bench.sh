#!/usr/bin/env bash
# scripts/shared-gpu-bench.sh OUT — on a one-GPU node: `braid bench strands` and `bench layer` at TP = EP = 2 with
# two ranks sharing the GPU (BRAID_SHARED_GPU=1) over the peer comm (model::make_peer_comm; no NCCL there). Every
# variant is verified as on two GPUs; the times are NOT measurements (the ranks time-slice the GPU). Device item
# `shared-bench` of scripts/device-run.sh (after `build`). T1/T2/T3: each run's limit in seconds.
set -u
OUT=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_VISIBLE_DEVICES=0 BRAID_SHARED_GPU=1 BRAID_COMMIT=${BRAID_COMMIT:-unknown}
run() {  # run NAME TIMEOUT args...
  local name=$1 t=$2; shift 2
  echo "== $name ($(date +%T))" | tee -a $OUT/run.log
  timeout $t mpirun -np 2 --oversubscribe --bind-to none -x CUDA_VISIBLE_DEVICES -x BRAID_SHARED_GPU -x NCCL_NVLS_ENABLE \
    -x BRAID_COMMIT stdbuf -oL -eL build/braid "$@" > $OUT/$name.log 2>&1
  echo "rc=$? ($(date +%T))" | tee -a $OUT/run.log
  grep -E 'SHARED|verif|Passed|FAILED|PASS|FAIL|error|Error|dropped' $OUT/$name.log | head -30 | tee -a $OUT/run.log
}
run strands-mixtral-cap1 ${T1:-150} bench strands --model mixtral-8x7b --tp 2 --ep 2 --seq 2048 --capacity 1.0 \
  --iters 1 --rounds 1 --warmup 0 --profile-iters 1 --decompose 0
run layer-mixtral-cap1 ${T2:-50} bench layer --model mixtral-8x7b --tp 2 --seq 2048 --capacity 1.0 --backward --iters 1 --warmup 0
run strands-70b-stack2 ${T3:-120} bench strands --model llama3-70b --tp 2 --seq 2048 --layers 2 \
  --iters 1 --rounds 1 --warmup 0 --profile-iters 1 --decompose 0
