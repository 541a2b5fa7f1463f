#!/usr/bin/env bash
# run_mpi.sh NP BINARY [args...] — runs a multi-rank test under mpirun, one process per GPU.
# Exits 77 (ctest: Skipped) with the reason when the node has fewer than NP GPUs or no mpirun.
set -u
np=$1
bin=$2
shift 2
gpus=$("$bin" --braid-count-gpus 2>/dev/null || echo 0)
if [ "${gpus:-0}" -lt "$np" ]; then
  echo "SKIPPED: $(basename "$bin") needs $np GPUs, $gpus visible"
  exit 77
fi
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIPPED: mpirun not found (install openmpi-bin: scripts/setup.sh)"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Never use NVLink multicast on shared nodes.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
exec mpirun -np "$np" --oversubscribe --bind-to none \
  -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
  "$bin" "$@"
