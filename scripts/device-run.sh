#!/usr/bin/env bash
# scripts/device-run.sh OUT [what...] — one call on the GPU node: build, run the tests, run the
# benchmarks, leave logs and JSON under OUT. `what`: any of build test allreduce peers transitions
# nccl (default: all but nccl). Uses .deps carried from this machine (scripts/setup.sh --stage).
set -uo pipefail
out=${1:?OUT folder}; shift
what=${*:-build test allreduce peers transitions}
export BRAID_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
log="$out/run.log"
has() { [[ " $what " == *" $1 "* ]]; }
ngpu=$(nvidia-smi -L | wc -l)
mpi() { mpirun -np "$ngpu" --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
  -x NVSHMEM_DISABLE_NVLS -x BRAID_COMMIT build/braid "$@"; }
if has build; then
  echo "== build" | tee -a "$log"
  make build JOBS=32 > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
fi
if has test; then
  echo "== ctest" | tee -a "$log"
  (cd build && ctest --output-on-failure --timeout 300 > "$out/ctest.log" 2>&1)
  echo "ctest rc=$?" | tee -a "$log"
  grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*" "$out/ctest.log" | tee -a "$log"
fi
if has allreduce; then
  echo "== bench allreduce" | tee -a "$log"
  mpi bench allreduce --algo nccl,oneshot-ll,oneshot,twoshot,int8,int6,int4,int8-nccl -b 64K -e 1G -f 2 \
    --json "$out/allreduce.jsonl" --write-table "$out/allreduce.tsv" 2>&1 | tee -a "$log"
  mpi bench allreduce --graph --algo nccl,oneshot-ll,oneshot,twoshot -b 64K -e 16M -f 2 \
    --json "$out/allreduce-graph.jsonl" 2>&1 | tee -a "$log"
  for d in student-t outlier; do
    mpi bench allreduce --algo nccl,int8,int6,int4 -b 4M -e 64M -f 16 --dist $d --json "$out/allreduce-dists.jsonl" \
      2>&1 | tee -a "$log"
  done
fi
if has peers; then
  echo "== peers: torch symmetric memory" | tee -a "$log"
  timeout 300 python3 -m torch.distributed.run --nproc-per-node "$ngpu" bench/peers/allreduce_symm_mem.py \
    --json "$out/peers-allreduce.jsonl" 2>&1 | grep -vE "^(W|I)[0-9]{4}|warn" | tee -a "$log"
fi
if has nccl; then
  for op in allreduce reducescatter allgather alltoall; do
    mpi bench nccl --op $op -b 64K -e 1G -f 2 --json "$out/nccl-$op.jsonl" 2>&1 | tee -a "$log"
  done
fi
if has transitions; then
  echo "== bench transitions" | tee -a "$log"
  cal=""
  if ls "$out"/nccl-*.jsonl >/dev/null 2>&1; then
    python3 scripts/calibration_from_json.py "$out"/nccl-*.jsonl > build/calibration.txt && cal="--calibration build/calibration.txt"
  fi
  # shellcheck disable=SC2086
  mpi bench transitions --dtype bf16,fp32 $cal --json "$out/transitions.jsonl" 2>&1 | tee -a "$log"
fi
# The device tool returns at most 8 files: bundle the JSON lines and tables.
(cd "$out" && tar czf results.tgz --remove-files $(ls *.jsonl *.tsv 2>/dev/null) 2>/dev/null)
echo "== done" | tee -a "$log"
