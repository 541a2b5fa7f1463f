#!/usr/bin/env bash
# scripts/run.sh BUILD — the main job (`make run`).
# On a node with >= 2 GPUs: NCCL baselines for four collectives and the peer bandwidth table, braid's
# all-reduce modes, Chimera's transitions, GEMM + reduce-scatter / all-gather + GEMM overlap (T3,
# FlashOverlap) on tensor-parallel shapes, and the Llama-3-70B layer at TP = all GPUs; one process per
# GPU, every row verified first, JSON lines under $BRAID_RESULTS (default BUILD/results/<card>x<n>/).
# Without GPUs: `braid info` and the list of what would run on a GPU node.
set -euo pipefail
build=${1:-build}
braid="$build/braid"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ngpu=$("$braid" info --count)
mpi() { mpirun -np "$ngpu" --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
  -x NVSHMEM_DISABLE_NVLS "$braid" "$@"; }
jobs=(
  "bench nccl --op allreduce -b 64K -e 1G -f 2"
  "bench nccl --op reducescatter -b 64K -e 1G -f 2"
  "bench nccl --op allgather -b 64K -e 1G -f 2"
  "bench nccl --op alltoall -b 64K -e 1G -f 2"
  "bench p2p --bytes 256M"
  "bench allreduce --algo nccl,oneshot-ll,oneshot,twoshot,int8,int6,int4 -b 64K -e 256M -f 4"
  "bench transitions --dtype bf16"
  "bench t3-gemm-rs --algo sequential,flashoverlap,t3-ring-dma,t3-ring-cublas,t3-auto --shape 16384,8192,1024 --shape 8192,8192,4096 --shape 8192,8192,14336"
  "bench ag-gemm --algo sequential,t3 --shape 16384,8192,1024 --shape 8192,8192,4096"
  "bench gemm-rs --transport symmetric,peer-copy-engine --owner --owner-chunks 1,2,4 --auto --shape 16384,8192,1024 --shape 8192,8192,2048"
  "bench gemm-ar --transport peer-copy-engine --owner --owner-chunks 1,2,4 --auto --shape 16384,8192,1024 --shape 8192,8192,4096"
  "bench layer --model llama3-70b --tp NGPU --seq 8192 --backward"  # NGPU: the process count
)
"$braid" info
if [ "$ngpu" -lt 2 ]; then
  echo
  echo "No multi-GPU node here ($ngpu GPU(s)). On a node with N >= 2 GPUs, make run executes:"
  for j in "${jobs[@]}"; do echo "  mpirun -np N braid ${j//NGPU/N} --json <results>/<job>.jsonl"; done
  echo
  echo "What needs no GPU: Chimera's communication plan for a Llama-3-70B layer (TP=SP=8, PP=2):"
  "$braid" plan --model llama3-70b --parallel tp=8,sp=8,pp=2 --seq 8192
  echo
  echo "DHelix: the W-shaped pipeline against 1F1B:"
  "$braid" pipeline --stages 2,4,8 --microbatches 16 --schedule both
  if "$braid" simulate --help >/dev/null 2>&1; then
    echo
    echo "SimGrid: the fused transitions on the 4x4 torus of Chimera's Table 4:"
    "$braid" simulate transition --transition all --topology torus2d:4x4 --bytes 64M | head -20
  fi
  exit 0
fi
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oE 'H100|H200|B200|A100' | tr A-Z a-z || echo gpu)
out=${BRAID_RESULTS:-$build/results/${card}x${ngpu}}
mkdir -p "$out"
for j in "${jobs[@]}"; do
  j=${j//NGPU/$ngpu}
  name=$(echo "$j" | awk '{print $2"-"$4}' | sed 's/-$//')
  case "$name" in
    p2p-*) name=p2p ;; allreduce-*) name=allreduce ;; transitions-*) name=transitions ;;
    t3-gemm-rs-*) name=t3-gemm-rs ;; ag-gemm-*) name=ag-gemm ;; layer-*) name=layer ;; gemm-rs-*) name=gemm-rs ;; gemm-ar-*) name=gemm-ar ;;
  esac
  echo
  # shellcheck disable=SC2086
  mpi $j --json "$out/$name.jsonl"
done
echo
echo "JSON results in $out"
