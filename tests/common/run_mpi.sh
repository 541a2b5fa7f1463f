#!/usr/bin/env bash
# run_mpi.sh NP BINARY [args...] — runs a multi-rank test under mpirun, one process per GPU (or, with
# BRAID_SHARED_GPU=1, NP processes on one GPU).
# Exits 77 (ctest: Skipped) with the reason when the node has fewer than NP GPUs or no mpirun.
set -u
np=$1
bin=$2
shift 2
# BRAID_SHARED_GPU=1: all NP ranks share the first visible GPU (functional emulation, no NCCL; see
# TeamOptions::shared_gpu), so one GPU is enough.
shared=${BRAID_SHARED_GPU:-0}
need=$np
[ "$shared" = 1 ] && need=1
gpus=$("$bin" --braid-count-gpus 2>/dev/null || echo 0)
if [ "${gpus:-0}" -lt "$need" ]; then
  echo "SKIPPED: $(basename "$bin") needs $need GPUs, $gpus visible"
  exit 77
fi
extra=()
if [ "$shared" = 1 ]; then
  first=${CUDA_VISIBLE_DEVICES:-0}
  export CUDA_VISIBLE_DEVICES=${first%%,*} BRAID_SHARED_GPU=1
  extra=(-x CUDA_VISIBLE_DEVICES -x BRAID_SHARED_GPU)
fi
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIPPED: mpirun not found (install openmpi-bin: scripts/setup.sh)"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Never use NVLink multicast on shared nodes.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec mpirun -np "$np" --oversubscribe --bind-to none \
  -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS ${extra[@]+"${extra[@]}"} \
  "$bin" "$@"
