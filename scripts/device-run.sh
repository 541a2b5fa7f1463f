#!/usr/bin/env bash
# scripts/device-run.sh OUT [what...] — one call on the GPU node: build, run the tests, run the
# benchmarks, leave logs and JSON under OUT. `what`: any of build test allreduce peers transitions
# nccl qar ctest-new ctest-mod overlap overlap-diag overlap-probe t3 layer layer-more layer-tp attn strands
# sweep-rs sweep-t3 sweep-a2a sweep-ar measure-rs pce-probe ar-phases gemm-swizzle gemm-cublas owner-phases t3-regions peers-tp t3-cases t3-diag ncu-t3 fo-reserve
# ar-ll128 ar-pdl ar-relaunch comm-domain ar-table strands-quick layer-capacity shared-bench bench-comm strands-ce strands-open t3-swizzle pipeline strands-smres strands-stack test-overlap strands-mixtral barrier-ab ar-grid ar-ce ar-batch ar-qpair ar-1step ar-1pipe ar-stamps ar-variant fo-ce-groups p2p gemm-variant tma-suite cublaslt ncu-gemm t3-np1 layer-moe-sizes moe-tile
# (default: build test allreduce peers transitions). Every item uses all GPUs of the node (`test`
# includes the *_np4/_np8 ctest entries, skipped below 4/8 GPUs). Items run in this file's order.
# Timings seen on 2x/4x H200 (2026-11-26): a fresh machine starts in ~40-70 s and builds in ~1 min;
# t3-cases ~2 min; allreduce + sweep-a2a ~2 min; sweep-rs + sweep-ar + layer-tp ~4 min; ar-phases +
# sweep-t3 (5 algos, T3_ALGOS=..., T3_AG=0) + sweep-a2a ~3 min; strands + measure-rs ~3 min.
# Sixth session (2x H200): `build test strands-quick` ~3.2 min cold; `t3-swizzle` (3 configs x 25 shapes)
# ~2 min; `ncu-t3` with NCU_CONFIGS (one config, 4 algos, 25 shapes) ~2.5 min; `build strands`
# (STRANDS_ITERS=20, interleaved) ~2.7 min cold. Seventh session: `build test pipeline strands-quick`
# 7.4 min cold; a warm machine (fire the next call within ~30 s) rebuilds and reruns a bench in seconds.
# Eighth session: `build test` ~4 min cold (ctest 2.2 min); `strands-smres` with SMRES_NVLINK=0 ~30 s
# warm; `sweep-rs` with OVERLAP_TRANSPORT=both (graph replay included) ~3.5 min; OVERLAP_TRANSPORT=all ~4 min.
# Ninth session: `build test strands-mixtral` ~4 min cold; `measure-rs` with OVERLAP_TRANSPORT=symmetric (both
# transports measured and decided per shape) ~4.5 min; `strands-mixtral strands-smres` with STRANDS_ROUNDS=2
# ~2 min warm. Pass BRAID_COMMIT as a literal sha:
# the device copy's git metadata may be stale (`git rev-parse` there named the session start's commit).
# Tenth session (2x H100): `build test strands-mixtral strands-smres` (STRANDS_ROUNDS=2) 5.4 min cold;
# `build measure-rs sweep-ar` (symmetric) 9.1 min warm, where sweep-ar hit its 300 s limit at 48/50 shapes;
# `build measure-rs` 4.5 min cold + `sweep-t3` (T3_ALGOS=sequential,flashoverlap,t3-auto) 3 min; `peers-tp` 19 s.
# Eleventh session (2x H100): `build test allreduce peers` 4.9 min cold; `build barrier-ab strands-mixtral` 3.6 min cold;
# `allreduce measure-rs` 3.9 min warm; `build test` (CTEST_E="np4|np8") 3.4 min.
# Twelfth session: `build test ar-grid` 4.1 min cold (2x H200); `build ar-ce peers` 2.1 min; `build test
# strands-smres gemm-swizzle` (CTEST_R=test_allreduce_mpi, STRANDS_THROTTLE=2, SMRES_NVLINK=0, STRANDS_ROUNDS=2)
# 5 min; `build test gemm-swizzle` (CTEST_R=overlap, SWIZZLES="1 8", 12 shapes) 3.4 min.
# Thirteenth session (every call served by 2x H200): `build test ar-batch peers` 5 min cold (full ctest);
# `build test ar-batch peers` (CTEST_R=test_allreduce_mpi) 2.5 min cold; `measure-rs strands-smres` 4.3 min warm;
# `allreduce` 34 s warm; `ncu-t3` (all 6 algos, 25 shapes) 3.5 min warm; `build test ar-batch ar-qpair peers` 2.3 min.
# Fourteenth session (every call 2x H200 again): `build test ar-batch ar-qpair ar-1step peers` (CTEST_R=allreduce)
# 3.8 min cold; `build ar-1pipe` (2-6 configs x 2 rounds) 2.5-2.7 min cold; `build test ar-1step` 5 min cold.
# Fifteenth session (2 calls 2x H200, 6 calls 2x H100): `build test ar-batch ar-1step peers` 5.8 min cold (H200),
# 4.9 min warm (H100); `build ar-stamps` (STAMP_MIN=4M STAMP_MAX=256M, 4 configs x 2 rounds) 2.8 min cold.
# Sixteenth session (six calls, all 2x H200): `build test ar-1step` 6.3 min cold; `build ar-stamps` (3 configs,
# 16M-256M) 3.5 min cold, 55 s warm; `build test ar-stamps` (4 configs, 64M, 6 algos) 5.8 min cold.
# Seventeenth session (five calls, all 2x H200): `build test ar-1step ar-stamps` 9.5 min cold (full ctest with a
# 246 s runtime-test hang, since fixed); `build test p2p` (CTEST_R=test_runtime) 3 min cold; `build test ar-stamps`
# (CTEST_R=test_allreduce_mpi, 5 configs at 64M) 3.2 min cold; `build test ar-1pipe` (4 configs) 3.4 min cold;
# `build test p2p` (full ctest, P2P_CHUNKS="16 64", P2P_BLOCKS=132) 4.8 min cold.
# Eighteenth session: `build test ar-stamps` (CTEST_R=test_allreduce_mpi, 4 configs at 64M) 3.3 min cold (2x H200);
# on 4x H200 (asked for nvidia-h100-x4) a cold start took ~4.5 min before the command ran: `build test allreduce
# transitions` hit DEADLINE=560 in the dists runs (full ctest at 4 GPUs ~4 min); `build test ar-stamps transitions`
# (CTEST_R="test_allreduce|test_transitions") 4.7 min; 2x H200 `build test ar-stamps` (CTEST_R, 2 configs,
# 16M-256M) 3.4 min, `build test ar-1step` (CTEST_R=test_allreduce) 3 min warm.
# Nineteenth session (six calls, all 2x H200): `build test ar-stamps` (CTEST_R="test_allreduce_mpi$", 4-6 configs,
# 16M-256M) 3.4-3.8 min cold; the same with STAMP_ALGOS (5 algos, 1M-256M, one config) 3.4 min; `build test
# ar-1step` (CTEST_R=test_allreduce, 7 algos at -f 2) 4.3 min cold; `build test` (full ctest) 6 min cold.
# Twentieth session (four calls, all 2x H200): `build test ar-1step` 6.2 min cold; `build ar-cvt` (a variant build
# of allreduce.cu, 4 runs of 7 algos 4M-256M) 6.6 min cold; `build fo-ce-groups` (test_overlap_mpi, 9 benches) 5.7 min.
# Twenty-first session (five calls, all 2x H200): `build test measure-rs` (CTEST_R=test_overlap, OVERLAP_TRANSPORT=all,
# MEASURE_PART=1/2) 5 min cold; `measure-rs` MEASURE_PART=2/2 2.4 min warm; `build test fo-ce-groups` (18 runs)
# 5.6 min cold; `build fo-ce-groups measure-rs` (8 runs + the whole sweep, OVERLAP_TRANSPORT=all) 8.8 min cold;
# `build test measure-rs` (MEASURE_SHAPES=bench/shapes/comm-heavy-h200x2.txt, OVERLAP_TRANSPORT=copy-engine) 4.5 min cold.
# Twenty-second session (six calls, all 2x H200): `build test measure-rs` (CTEST_R="test_overlap|test_harness",
# OVERLAP_TRANSPORT=all, MEASURE_PART=1/2, MEASURE_ARGS="--tune-candidates 6") 5.6 min cold, part 2/2 3.4 min warm;
# `build test fo-ce-groups` (CE_TRANSPORT=copy-engine,peer-copy-engine, 4 shapes x 2 reserves) 4 min cold;
# `build test measure-rs` (OVERLAP_TRANSPORT=symmetric,peer-copy-engine, halves) 6.2 min cold, 3.4 min warm.
# Twenty-third session (seven calls, all 2x H200): `build test sweep-ar` (full ctest, AR_SHAPES=bench/shapes/ar-few.txt,
# OVERLAP_TRANSPORT=symmetric,peer-copy-engine) 7.3 min cold; `measure-rs` halves (symmetric,peer-copy-engine,
# --tune-candidates 6) 3-3.6 min warm; `build measure-rs` (peer-copy-engine, "--tune-candidates 6 --pce-reserves 16,0",
# MEASURE_PART=1/2) 4.3 min cold; the other half 2.4 min warm, a repeat 1.9 min warm.
# Twenty-fourth session (2x H200): `build test pce-probe` (CTEST_R=test_overlap) 3.3 min cold; a measure-rs half
# (symmetric,peer-copy-engine) + sweep-a2a both 3.6 min warm; a half (peer-copy-engine) + sweep-ar (ar-few) 2.8 min
# warm; `build test sweep-a2a` (A2A_TRANSPORT=all) 4.9 min cold; sweep-a2a all 1.5 min warm; on 4x H200 `build
# sweep-a2a` (A2A_SHAPES=bench/shapes/a2a-few.txt) 3 min cold.
# Twenty-fifth session (2x H200): `build test rs-stores` (CTEST_R=test_overlap, two variants + torch) 4.5 min cold;
# `build measure-rs` (peer-copy-engine, --pce-modes copies,stores, half) 3.9 min cold, the other half + peers-tp 3.1 min
# warm; `gemm-variant` 2.9 min warm; `build test rs-stores` (CTEST_R='test_overlap_mpi$', RS_VARIANTS=owner,
# RS_PEERS=0) 4.2 min cold. The device tool returns at most 8 files (the bundle below keeps it so).
# Forty-first session (2x H200, seven calls, 1430 s held): `build test sweep-t3` (BUILD_TARGET="braid test_t3_mpi
# test_t3_map", CTEST_R=test_t3_, 5 T3 algos, T3_AG=0) 4.7 min cold; `t3-swizzle` (4 segment configs, 2 algos) + two
# measure-rs halves (peer-copy-engine, with and without --reserve-fit) in one call, each script run into its own
# $OUT/<sub> (DEADLINE per run) 3.9 min warm; `ncu-t3` (4 algos, 25 shapes) 3 min warm; `ar-stamps` 12 s warm; `ncu-t3`
# with NCU_CONFIGS (3 configs x 6 shapes x 3 algos) 2.2 min warm; (2 algos, 25 shapes) 2.9 min warm.
# Forty-second session (one H200 only): `build test t3-cases` (CTEST_R=test_t3_) 3.8 min cold; `build test gemm-cublas`
# 4.5 min cold; `build test layer-capacity` (CTEST_R="test_layer_gpu|test_strands_mpi_np1|...", CAPACITIES) 3.6-3.7 min cold;
# two one-rank `bench strands --capacity` runs at seq 2048 (--iters 3 --rounds 1) 19 s warm.
# Fifty-second session (four calls, all 2x H200, ~1665 s held): `build test ar-variant` (BUILD_TARGET="braid
# test_allreduce_mpi", CTEST_R='test_allreduce_mpi$', VARIANT_DEFS=BRAID_AR_PACKQ=0: the variant TU compiles in ~2 min)
# 5.9 min cold; `build test` (CTEST_E='shared|np4|np8|test_allreduce_mpi$', everything else at 2 GPUs) 5 min warm (the
# warm machine's build took 16 s); `test` with CTEST_R='shared|test_strands_plan' 7 min (test_comm_mpi_shared8 148 s,
# test_allreduce_mpi_shared2 71 s, test_strands_mpi_shared2 55 s) — test_strands_plan reads committed pair tables under
# bench/results/h200x2: keep strands-pairs-*.txt in the tree when moving that folder out for the 64-MiB limit;
# `build strands-smres strands-mixtral` (SMRES_NVLINK=0, MIXTRAL_THROTTLES=1, STRANDS_ROUNDS=3) 7.6 min cold, of which
# the Mixtral one-layer run hit its 295-s watchdog (docs/dhelix.md) and the 70B one-layer run took ~2.5 min.
# Fifty-first session (four calls, all 2x H200, ~1125 s held): `build test` (BUILD_TARGET="braid test_allreduce_mpi",
# CTEST_R='test_allreduce_mpi$', 51 s of ctest) + three 70B stacks (STACK_TEST=0, one throttle each, ~75-90 s) 5.5 min
# cold; `build` (BUILD_TARGET=braid) + two 70B stacks at 1 CTA + one at 2 CTAs 5.3 min cold (the stack now also runs
# strands-corun-moves-2link-dag: 17 variants); two Mixtral stacks (STACK_THROTTLES="1 2", ~45 s each, pairs profiled)
# per call 2.3-2.8 min warm.
# Fiftieth session (five calls, all 2x H200, ~1660 s held): `build ar-ll128` (BUILD_TARGET="braid test_allreduce_mpi",
# LL128 tests + 2 rounds x graph/direct 64K-16M) 2.7 min cold; `build test ar-table peers` (CTEST_R='test_allreduce_mpi$',
# the table to 1 GiB, the graph band to 64M with -sym, torch) 4.7 min cold; `build` + LL128 at 4 ranks on a shared GPU
# (tests/common/run_mpi.sh 4 with BRAID_SHARED_GPU=1, ~30 s) + four 70B stacks at 1 CTA (STACK_TEST=0, DEADLINE=75 each,
# ~70 s each) 6.6 min cold; two old trees (git archive of 9e94336 and cda3d44, built with -DBRAID_BUILD_TESTS=OFF, ~2.5
# min each incl. a 70B stack at --iters 2 --rounds 1) 5.8 min cold — the working tree may hold at most 64 MiB with the
# carried .deps: bench/results (31 MB) had to be moved out of the tree for that call. Next on 2x H100: `ar-ll128`
# and `ar-table` (issue 3's bf16 band with the LL128 one-shot), then the plan below.
# Forty-ninth session (nine calls, all 2x H200, ~1720 s held; the ninth `build` of test_strands_mpi alone + a filtered mpirun 151 s cold): `build test` (BUILD_TARGET="braid test_strands_mpi
# test_comm_mpi", two entries) + two Mixtral stacks with STRANDS_ARGS="--moe-sizes host|device --op-trace" (DEADLINE=100
# each) 4.3 min cold; `build test` (test_layer_gpu) + one stack 3.6 min cold; with test_strands_mpi and DEADLINE=200 the
# ctest got ~20 s after a 3-min cold build and timed out (give `build test` DEADLINE=290); two stacks 72-81 s warm
# (a warm `build` of an unchanged tree takes ~0 s); one stack 35 s warm. `E=BRAID_STRANDS_LINK_PRIORITY=high` passes the
# knob to the ranks. Next: the Mixtral stack at 2 CTAs with the link streams at high priority on 2x H100 (70.9-72.3% on
# 2x H200) and the 70B stack at high priority (not measured); the grouped GEMMs (device counts: 9.5 ms heavier per pass).
# Forty-eighth session (six calls, all 2x H200, ~1600 s held): `build test` (BUILD_TARGET="braid test_moe_gemm_gpu
# test_layer_gpu test_layer_mpi test_comm_mpi test_strands_mpi", 5 ctest entries) + a Mixtral `strands-stack` at
# STACK_THROTTLES="1 2" (one call of this script per $OUT/<sub>, tarred into one file) 4.1 min cold; the same stack with
# host counts 67 s warm; `build test layer-moe-sizes strands-stack` (NVLink) 4.5 min cold; `build moe-tile` (three
# variants: 9 compiles at once ~1.5 min, then 2 rounds x 5 bench layer runs ~3 s each) 3.7 min cold; `build test`
# (two entries) + two one-throttle Mixtral stacks (device, host; ~45 s each) 3.8 min cold.
# Next (done in the forty-ninth session: stale routing in the compute-only pass): a per-operator trace of one compute-only
# stack pass with device and with host counts; gate_up dgrad's grouped GEMM (1.24x cuBLAS); on 2x H100 the plan below.
# Forty-seventh session (one H200, then 2x H200): `build layer-capacity` (BUILD_TARGET=braid, CAPACITIES="0 1.0") 2.9 min
# cold + a one-rank `bench strands` 10 s warm; `build test` (BUILD_TARGET="braid test_moe_gemm_gpu test_layer_gpu
# test_layer_mpi test_comm_mpi test_strands_mpi", CTEST_R="test_moe_gemm|test_layer_gpu$|..._shared2|_np1") 1.7 min warm;
# on 2x H200 `build test strands-stack` (the same targets, CTEST_R="test_moe_gemm|test_layer_mpi$|test_strands_mpi$|
# test_comm_mpi$", STACK_TEST=0 STACK_MODELS=mixtral-8x7b STACK_THROTTLES=1 STRANDS_ARGS="--moe-sizes device") 3.8 min
# cold; three Mixtral stacks (one call of this script per $OUT/<sub>, ~40 s each) + four `bench layer` 2.1 min warm;
# `strands-mixtral` with the graph variants at 10 x 3 ran past its old 150-s limit (now MIXTRAL_T, default 300).
# Next: `build test` with CTEST_R="test_layer_gpu$|test_strands_mpi" (the SwiGLU/gather grid for device-counted rows has
# not run), then the Mixtral stack with STRANDS_ARGS="--moe-sizes device" at STACK_THROTTLES="1 2" against host counts
# in the same call (compute-only pass 240 ms device against 188 ms host: where it goes), on 2x H100 when lent.
# Forty-sixth session (2x H200, six calls, ~1520 s held): `build test bench-comm strands-ce` (BUILD_TARGET="braid
# test_comm_mpi test_layer_mpi test_strands_mpi test_t3_mpi", CTEST_R='test_comm_mpi$|test_layer_mpi$|test_strands_mpi$|
# test_t3_mpi$' (48 s), COMM_MAX=64M, STRANDS_ITERS=5 STRANDS_ROUNDS=2) 4.6 min cold; `build strands-mixtral`
# (MIXTRAL_THROTTLES="0 1", 10 iterations x 4 rounds) 4.6 min cold; `build t3-swizzle ncu-t3` (two configs x 2 algos x 25
# shapes each) 6 min warm; Mixtral `strands-stack` (STACK_TEST=0, one throttle) ~35 s warm per run, several runs in one
# call by calling this script once per $OUT/<sub> (E= and STRANDS_ARGS differ per run); `build strands-stack` 4 min cold;
# a seventh call `build strands-stack` (BUILD_TARGET=braid, one Mixtral stack) 2.6 min cold, 155 s of command.
# Done on 2x H200 there: bench-comm, strands-ce, test_comm_mpi$ at two GPUs, the Mixtral stack dropless vs --capacity 1.0,
# DEFER_DISPATCH, T3's column order (ncu-t3 / t3-swizzle). Next on 2x H200: the Mixtral stack on NVLink (STACK_THROTTLES=0,
# dropless and capacity), and `layer-capacity` with CAPACITIES="0 1.0" (bench layer's new host(us) columns: where the
# dropless passes lose to the host; first GPU run of 4e65acc); on 2x H100: the plan below ("On 2x H100"), plus ncu-t3 with NCU_CONFIGS="col=BRAID_T3_COLUMN_ORDER=1
# base" NCU_ALGOS=sequential,t3-direct-tma NCU_SHAPES from bench/shapes/within2x-h100x2.txt (issue 8's DRAM criterion).
# Forty-fifth session (one H200 only): `build test bench-comm` (BUILD_TARGET="braid test_comm_mpi test_layer_mpi",
# CTEST_R="test_comm_mpi|test_layer_mpi_shared2": pass; test_comm_mpi_shared8 alone 145 s; COMM_MAX=64M) 6.6 min cold;
# `build` (BUILD_TARGET=braid) + one-rank `bench allreduce --phases` + `ncu-gemm` with NCU_KERNELS=quant_onestep
# NCU_COUNT=3 NCU_ARGS="allreduce --algo int4-1step,int8-1step -b 64M -e 64M --iters 3 --warmup 1" 2.9 min cold (the
# three profiled launches were all INT4's); full `build test` with CTEST_E="shared8|shared4|_np4|_np8" 7.6 min cold
# (46 entries: 37 pass, 9 two-rank skip). `bench nccl` takes one --op per run.
# Forty-fourth session (one H200 only): `build test` (BUILD_TARGET="braid test_pipeline_mpi test_t3_mpi test_overlap_mpi",
# CTEST_R="test_pipeline_mpi_shared2|test_t3_mpi_shared2|test_overlap_mpi_shared2": all pass) 2.8 min cold; `build test`
# with test_comm_mpi (+ test_layer_mpi) and one-rank `bench comm` runs 3.2-4 min cold. Next on two GPUs: `bench-comm`
# (COMM_RESERVES="0 8", ~3 min?) and `strands-ce` (the strands over peer-ce against NCCL at NVLink, GEMMs leaving
# SMRES_CE SMs) — the copy-engine comm has never run between two GPUs; test_comm_mpi$ (both engines, NCCL compared).
# Forty-third session (one H200 only): `build test` (BUILD_TARGET="braid test_comm_mpi test_layer_mpi test_strands_mpi",
# CTEST_R="test_comm_mpi|..._shared|test_strands_mpi_np1") 4.8 min cold (build 3 min); `build shared-bench` 2.5 min warm
# (build 2.1 min; the three shared-GPU benches 17 s); three shared-GPU `bench strands --layers 2|3` 2.6 min cold.
# On one GPU: CTEST_R="_shared|_np1" checks the layer and strands at TP = EP = 2 over the peer comm (no NCCL there);
# test_pipeline_mpi_shared2 (the PP executor's peer channels, 13e12da) has never run. 2x H200 at the end: `build` of
# braid + test_layer_mpi + test_strands_mpi and those two ctest entries in 152 s from a cold machine (32 cores).
# Next on two GPUs: CTEST_R="test_layer_mpi$|test_strands_mpi$|test_t3_mpi$" (the capacity layer at EP = 2, its strands and
# stack, the T3 column order at two GPUs), then `strands-mixtral` with and without STRANDS_ARGS="--capacity 1.25" (and
# `strands-stack` with STACK_MODELS=mixtral-8x7b), `ncu-t3` NCU_CONFIGS="col=BRAID_T3_COLUMN_ORDER=1 base" and
# `t3-swizzle` T3_CONFIGS="base col=BRAID_T3_COLUMN_ORDER=1" with T3_ALGOS=sequential,t3-direct-tma.
# Next on two GPUs (H100 first): sweep-t3 with T3_ALGOS=sequential,flashoverlap,t3-direct-tma,t3-auto (t3-auto now tunes
# direct-tma too), `ncu-t3` with NCU_ALGOS=sequential,t3-direct-tma,t3-auto (direct-tma's default is the whole chunk
# again), and issue 4's H100 measure-rs (no --reserve-fit: it did not help at two ranks).
# First on any GPU: `build test` with CTEST_R=test_t3_ (the epilogue's stored[] index changed in the last commit and
# direct-tma's column order, BRAID_T3_COLUMN_ORDER=1, case 14, has never run; one GPU: the _np1/_shared entries); on two:
# `ncu-t3` with NCU_CONFIGS="col=BRAID_T3_COLUMN_ORDER=1 base" NCU_ALGOS=sequential,t3-direct-tma, and `t3-swizzle` with
# T3_ALGOS=sequential,t3-direct-tma T3_CONFIGS="base col=BRAID_T3_COLUMN_ORDER=1".
# Fortieth session (only `nvidia-h200`): `build test` with BUILD_TARGET="braid test_t3_mpi test_t3_map", CTEST_R=test_t3_
# (test_t3_mpi_shared2/4/8: 2, 4 and 8 ranks time-slicing the one GPU, BRAID_SHARED_GPU=1; ~15 s together) + `t3-np1`
# 3.2 min cold. First on any two-GPU card for issue 8 (direct-tma's remote path ran only on one shared GPU, never
# over NVLink): `build test sweep-t3` as below, then `t3-swizzle` with T3_ALGOS=sequential,t3-direct-tma and
# T3_CONFIGS="seg0=BRAID_T3_SEGMENT_ROWS=0 segdef seg2048=BRAID_T3_SEGMENT_ROWS=2048 seg512=BRAID_T3_SEGMENT_ROWS=512"
# (the interleave A/B; 2048 rows keeps the swizzle at 8, the default 1024 takes 4; on H100
# T3_SHAPES=bench/shapes/within2x-h100x2.txt; compare with `scripts/ab_rows.py t3-w2x-seg0.jsonl t3-w2x-segdef.jsonl
# --algo t3-direct-tma --field speedup_vs_first`). Issue 4: `measure-rs` as in the H100 line below, once more with
# `--reserve-fit` added to MEASURE_ARGS (the reserve that adds no GEMM wave; one H200 at one rank: 16 -> 4 SMs on
# 4096x4096x1024, op GEMM 60.6 -> 50.3 us; what NCCL loses with 4 free SMs is the open question). `fo-reserve` (FO_*).
# Thirty-ninth session (only `nvidia-h200`): `build test t3-np1 ncu-gemm` (BUILD_TARGET="braid test_t3_mpi", CTEST_R=
# test_t3_mpi_np1, NCU_KERNELS='GemmUniversal|nvjet', NCU_ARGS="t3-gemm-rs ...") 3.6 min cold; with test_overlap_gemm_gpu
# and test_overlap_mpi too 4.2 min cold; `build test ncu-gemm t3-np1` (two t3-np1 rounds) 3.1 min cold; `build ncu-gemm`
# 40 s warm. First on any two-GPU card for issue 8: `build test sweep-t3` with CTEST_R='test_t3_mpi$'
# T3_ALGOS=sequential,t3-direct,t3-direct-tma,t3-ring-dma,t3-auto (direct-tma's remote reduce-adds, waits and releases
# have never run at two ranks), then `ncu-t3` with NCU_ALGOS=sequential,t3-direct,t3-direct-tma,t3-ring-dma (DRAM bytes;
# on H100 also NCU_SHAPES="$(grep -v '^#' bench/shapes/within2x-h100x2.txt)").
# Thirty-eighth session (only `nvidia-h200`): `build gemm-variant` (3 variants, gemm-short, 2 rounds, VARIANT_T=60) 5.7
# min cold; `build test gemm-variant ncu-gemm` (BUILD_TARGET="braid test_overlap_gemm_gpu", 2 variants, NCU_BINS="base
# stock") 5.1 min cold; the whole GEMM sweep by hand (`mpirun -np 1 build/braid bench gemm-rs --shapes
# bench/shapes/sweep.txt --iters 20 --no-tune`) 3.8 min warm; BUILD_TARGET=test_overlap_mpi + test_overlap_mpi_np1 2.9 min
# cold. Next for issue 4 on one GPU: the same sweep on one H100 (`nvidia-h100-x1`); `ncu-gemm` on T3's GEMM kernel
# (NCU_KERNELS) to see whether its general epilogue pays the same instruction fetch.
# Thirty-seventh session (only `nvidia-h200`, one H200, lent): `build cublaslt gemm-cublas` (BUILD_TARGET=braid, the
# cuBLASLt probe on 14 shapes, the whole sweep with mode 3: 49 of 50 shapes before DEADLINE=575) 7.9 min cold; `build
# gemm-variant` (3 cluster variants, gemm-short, 2 rounds at VARIANT_T=90) 4.5 min cold; BUILD_TARGET=test_strands_mpi
# and a one-rank test run ~3 min cold. test_strands_mpi_np1 (new ctest entry) runs on any one-GPU node. Still to run on
# 2 GPUs: everything below (no 2-GPU kind was lent), and 16384x8192x14336 of the mode-3 sweep (GEMM_SHAPES one line).
# Next (thirty-sixth session's end): nothing has run on H100 since bb85931 (only H200 lent in the thirty-second to
# thirty-sixth sessions). Ran this session (2x H200): the Mixtral stack (test + bench), chained units, split slots and
# chained round-robin (tests pass; 70B split-slot 90-91% hidden at 1.049x memory at 1 CTA; Mixtral chained slower than
# joined). Not GPU-run: the bench's second compute reference (hidden(solo) column, 4d55b15).
# First call on any 2-GPU card: `build strands-stack` with STACK_TEST=1 STACK_MODELS="llama3-70b" STACK_THROTTLES="1 2"
# (checks the hidden(solo) and host columns; ~4 min cold). For Mixtral's chained slowdown: the Mixtral stack again with
# E=BRAID_STRANDS_DEFER_DISPATCH=4 and =12 (backward ops queued ahead of each MoE dispatch's host wait; its test runs
# in test_strands_mpi), then
# E=BRAID_STRANDS_LINK_PRIORITY=high and --a2a-link cross (no STACK_* knob: run `mpi bench strands` by hand). The rest of the GEMM
# sweep A/B: GEMM_SHAPES=a file of the 20 shapes after the first 30 of bench/shapes/sweep.txt, VARIANT_T=300, one round.
# Pass BRAID_COMMIT as a literal sha (the device copy's git metadata names the session start's commit).
# The thirty-sixth session's calls (2x H200): `build strands-stack` (BUILD_TARGET="braid test_strands_mpi", test +
# Mixtral and 70B at 2 caps) 4.3 min cold; the same with 12-15 variants at one cap per model 3.8-4.1 min cold; `build
# strands-stack` (BUILD_TARGET=braid, STACK_TEST=0, two models at 2 CTAs and NVLink) 4.1 min cold.
# Fifty-third session (eight calls, all 2x H200, ~1275 s held): `build strands-stack` (BUILD_TARGET="braid
# test_strands_mpi", STACK_TEST=1, Mixtral stack at 1 and 2 CTAs) 4.5 min cold; a one-layer `bench strands` by hand
# (mpirun, no `ts` on the device: a pipe into it kills the run) ~20 s warm for Mixtral, ~60 s for 70B (--pairs
# e782a52); `build` (BUILD_TARGET=braid) + 70B and Mixtral one layer 3.6 min cold; 2x 70B + 2x Mixtral 4 min cold.
# The device tool returns at most 8 files: give each run one log and few JSON files.
# Fifty-fourth session (three calls, 2x H200, ~760 s held): `build strands-mixtral strands-smres` (BUILD_TARGET="braid
# test_strands_mpi test_strands_plan" MIXTRAL_THROTTLES="1 2" SMRES_NVLINK=0) 5.3 min cold; warm `build strands-mixtral`
# (MIXTRAL_THROTTLES="1 2 1") + `strands-smres` at STRANDS_THROTTLE 1 and 2 (one call each, under $OUT/s1, $OUT/s2) 3.7 min;
# `build test` (every target, CTEST_E='shared|np4|np8': 39 entries, 5.8 min of ctest) 8 min cold; warm `build
# strands-mixtral` (BUILD_TARGET=braid, MIXTRAL_THROTTLES=1) 2.2 min; `build strands-smres` (BUILD_TARGET=braid,
# STRANDS_THROTTLE=2, SMRES_NVLINK=0: the 70B layer profiles its table) 2.9 min cold.
# Fifty-sixth session (six calls, 2x H200, ~1615 s): `build test strands-ce` (BUILD_TARGET="braid test_layer_mpi
# test_strands_mpi", two tests 32 s) 3 min cold; a 70B NVLink `bench strands` over nccl-ce stops at its verification in
# ~100 s (pairs profiled), a `--verify-only` run on a saved table takes ~10 s, a full run with 16 iterations ~25 s and
# with 64 (8 per pass) ~60 s; `build` (BUILD_TARGET=braid) ~2.5 min cold. Next on a 2-GPU machine: full-NVLink runs with
# at least 8 iterations per pass (STRANDS_ITERS=64 STRANDS_ROUNDS=8: with 2 per pass the reference's spread exceeded the
# exposure; the bench prints "# noise:" now), e.g. the Mixtral layer (EP = 2, NCCL) that way; and first of all the
# one-layer throttled benches again (`strands-smres` SMRES_NVLINK=0, `strands-mixtral` MIXTRAL_THROTTLES="1 2"): since
# 0a40a5a their arena rows are timed interleaved in a group of their own (before, each on its own: clock not controlled),
# with `build test` (BUILD_TARGET="braid test_layer_mpi test_strands_mpi", CTEST_R='test_layer_mpi$|test_strands_mpi$':
# LayerMpi.PlacedSavedTensorsAreNotReadAfterTheirNamedReaders, 1519c40, has not run yet).
# Fifty-seventh session (five calls, 2x H200, ~1600 s): `build test` (BUILD_TARGET="braid test_layer_mpi test_strands_mpi",
# CTEST_R) + `strands-smres` (SMRES_NVLINK=0, STRANDS_ITERS=40 STRANDS_ROUNDS=5, SMRES_T) + `strands-mixtral`
# (MIXTRAL_THROTTLES=1) into $OUT/t, $OUT/s, $OUT/m: 6.7 min cold; warm `build` + Mixtral NVLink (64 x 8) + 70B 1 CTA
# 4.1 min; warm `build` + both at 2 CTAs 3.7 min; `build test` (test_strands_mpi) + two `--op-trace` runs by hand 4.1 min
# cold; `build` + two 20-layer 70B stacks at NVLink (6 x 3, --comm nccl-ce / nccl, --pairs the eb35616 table) 4.2 min
# cold (each stack ~60 s). Next on a 2-GPU machine: `build test` with BUILD_TARGET="braid test_layer_mpi
# test_strands_mpi" CTEST_R='test_layer_mpi$|test_strands_mpi$' (the opening-chunks tests, b3072fa), then one 70B layer
# at full NVLink over nccl-ce and at 1 CTA with the -open4 variants beside the plain moves orders (`strands-open`,
# both runs with --op-trace; ~2 x 1.5 min); then the stack's op trace at full NVLink (`bench strands --layers 20 --op-trace`, d860992) beside
# the chained round-robin, which hid the most there (36-46%).
# Fifty-eighth session (five calls, 2x H200, ~1690 s): `build test strands-open` (BUILD_TARGET="braid test_layer_mpi
# test_strands_mpi", CTEST_R='test_layer_mpi$|test_strands_mpi$') 6.6 min cold; `build` + a 20-layer 70B stack at NVLink
# with --op-trace by hand 3.4 min cold; `build test` + one 70B NVLink layer (64 x 8, --op-trace --open-chunks 0) + the
# stack (6 x 3) by hand 5.7 min cold (the a89b5bd call: the layer stopped at its verification, 3.9 min); `build` (braid)
# + one 70B NVLink layer 4.2 min cold. -open4: no gain (docs/dhelix.md). Next on a 2-GPU machine: the 70B NVLink layer
# and stack again at e51ceeb (the one-layer spread, 450-563 us, is most of the 757-950 us exposed: more passes), and a
# layer whose replicated gradients are all-reduced once per step (Megatron's way) instead of per backward.
# Fifty-ninth session (seven calls, 2x H200, ~1750 s): `build test` (BUILD_TARGET="braid test_layer_mpi test_strands_mpi",
# CTEST_R='test_layer_mpi$|test_strands_mpi$') + one 70B NVLink layer (64 x 8, --replicated-grads step) 4.6 min cold;
# warm: the stack (6 x 3) + the layer per backward 3.1 min, the layer with --op-trace 2.3 min, the stack with --op-trace
# 1.6 min; `build` + stack + layer with --comm-scale 3, 5.4 min cold; `build test` (test_strands_mpi) + the stack 4.4 min
# cold; `build` + the stack per backward 3.7 min cold (all by hand, as in the fifty-eighth; `strands-ce` does the
# one-layer run with CE_COMMS=nccl-ce CE_MODELS=llama3-70b SMRES_CE=0 STRANDS_ITERS=64 STRANDS_ROUNDS=8
# STRANDS_ARGS="--replicated-grads step --open-chunks 0 --pairs bench/results/h200x2/strands-pairs-llama3-70b-nvlink-nccl-ce-eb35616.txt",
# and the stack with STRANDS_ITERS=6 STRANDS_ROUNDS=3 and --layers 20 added to STRANDS_ARGS). Per-step reduce, comm scale
# and the backward's moves in the chained round-robin: none lifted full NVLink past ~68% (docs/dhelix.md). Next on a
# 2-GPU machine: nothing of issue 9 at full NVLink is left that the H200's power-capped clock lets a run resolve; on
# 2x H100, the plan below ("On 2x H100").
# Sixtieth session (3 calls 4x H200 ~570 s, 5 calls 2x H200 ~1080 s): 4x `build test` (CTEST_R='_np4$', the five
# _np4 entries, ctest 288 s) 7.1 min cold; warm `ar-table` (TABLE_MAX=256M GRAPH_MAX=16M) + bench t3-gemm-rs at 4 ranks
# on the six large shapes by hand 59 s; `layer-tp` + quantized all-reduce 16M-256M 24 s. 2x `build measure-rs` (BUILD_TARGET=braid,
# OVERLAP_TRANSPORT=peer-copy-engine, MEASURE_PART=1/2, the thirtieth session's MEASURE_ARGS with --owner
# --owner-chunks 1,2,4 --auto) 5.4 min cold; part 2/2 + `sweep-t3` (T3_AG=0) 7 min warm; `sweep-t3` (T3_RS=0) 40 s;
# `peers-tp` 18 s; `build` (BUILD_TARGET="braid test_overlap_mpi") + one test by hand + `measure-rs`
# (MEASURE_SHAPES=bench/shapes/pce-rho.txt, 8 shapes) 2.9 min cold. Next: the whole measure-rs sweep with the rho fix
# (4c2a6da) on 2x H200 and on 2x H100.
# Sixty-first session (six calls 2x H200, one 1x H200, ~1620 s; every call cold: idle release is 30 s): 2x `build
# p2p` (BUILD_TARGET=braid, P2P_BLOCKS=16,32,66,132) + one bench allreduce 2.1 min; `build ar-stamps`
# (BUILD_TARGET="braid test_allreduce_mpi", ONESTEP_CFGS with two settings, STAMP_MIN/MAX) 3.6 min; with seven
# settings at 64M-256M 4 min; 1x H200 `build test` (CTEST_R="test_allreduce_mpi_shared2|test_split_units") 3.2 min;
# `build test` (CTEST_R='test_allreduce_mpi$') + two plain bench runs 3.3 min; `build test ar-stamps` (CTEST_R=
# test_split_units, three settings) 3 min. Next on 2x H100: `ar-1step` with the
# tapered default, then the plan below.
# Sixty-fifth session (2x H200): `build pipeline` (BUILD_TARGET="braid test_pipeline_mpi", PIPE_LPCS=1 PIPE_MS="8 16"
# PIPE_ROUNDS=2 PIPE_ARGS="--w-si corun,fb,bf"; ctest 44 s) ran out at DEADLINE=570 in the last run (build ~2.4 min
# cold; a 5-schedule run ~60 s at M = 8, ~115 s at M = 16); warm `pipeline` (PIPE_NOTEST=1 PIPE_LPCS=2 PIPE_MS=8) 3.6
# min. Pass BRAID_COMMIT=<sha> (forgotten in the first: the rows named the configure-time commit, fixed by hand).
# `build pipeline` (BUILD_TARGET="braid test_pipeline_mpi", PIPE_LPCS="1 2", with the block-timing step) 8 min cold,
# the lpc-2 run cut by DEADLINE=560; `build pipeline` (BUILD_TARGET=braid, PIPE_NOTEST=1, lpc 1, --w-si fb) 3.2 min cold.
# Sixty-sixth session (2x H200): `build pipeline` (BUILD_TARGET="braid test_pipeline_mpi", PIPE_LPCS=1 PIPE_MS=8
# PIPE_ROUNDS=2 PIPE_ARGS="--w-si fb" PIPE_RA="-1 0 1") ran past DEADLINE=570 in round 2's last run (build 2.3 min cold,
# ctest 60 s, ~55 s a run); the same with PIPE_ARGS="--w-si fb --channels nccl,ce" and no PIPE_RA 8.2 min cold (ctest
# 72 s, ~95 s a two-transport run); PIPE_MS=16 one round 6.1 min cold. Next, first: `build test` with
# CTEST_R='test_runtime_mpi$|test_pipeline_mpi|test_harness_gpu|fusion' (code written after the device time: the
# member-aware SymmetricBuffer, device hashes, the executor's bounded teardown). Then (4x H200 or 2x H100): `build
# pipeline` with PIPE_ARGS="--w-si fb,bf --channels nccl,ce" at M = 8 and 16, and PIPE_LPCS=2 (runs should be much
# shorter now that the hashes are computed on the GPU).
# Sixty-fourth session (4x H200, then 2x H200): 4x `build test` (CTEST_R='_np4$|test_allreduce_mpi$', six entries,
# ctest 5 min) 6.8 min cold (build 106 s on 64 cores); warm `test ar-table ar-variant` (CTEST_R='^none$', TABLE_MAX=256M
# GRAPH_MAX=16M, AR_VARIANTS="nohint:BRAID_AR_CACHE_HINTS=0", VARIANT_ALGOS=nccl,int8,int6,int4, 16M-256M) 2.2 min;
# warm `ar-pdl` (PDL_TESTS=none, PDL_ROUNDS=2) 1.4 min; `build` + bench pipeline at PP = 4 by hand (M = 8, 16; lpc 2
# needs > 85 s a run) + `transitions` 7.4 min cold. 2x `build` (BUILD_TARGET=braid) + six bench pipeline runs 8.6 min
# cold (build ~3 min).
# Sixty-third session (2x H200): `build ar-variant` (BUILD_TARGET=braid, three AR_VARIANTS compiled at once, 5 algos,
# 16M-256M, 2 rounds) 4.6 min cold; `build ar-variant comm-domain` (two variants, 8 algos 4M-256M, DOMAIN_BINS="base v11",
# one DOMAIN_ENVS, 2 rounds) 4.5 min cold; `build test` (every target, CTEST_E='shared|np4|np8') ran out at DEADLINE=530
# with 34 of 43 entries done (build 175 s cold); the other 20 (with most shared entries) 3.4 min warm; strands_mpi_shared2
# + comm_mpi_shared4 96 s, comm_mpi_shared8 149 s.
# Sixty-second session (2x H200): `build ar-pdl` (BUILD_TARGET="braid test_allreduce_mpi", two rounds x PDL 0/1 x
# call/batch/graph, 64K-16M, 3 algos) 3.6 min cold; the same with test_layer_mpi built too, PDL_TESTS="*",
# PDL_ROUNDS=1, 4 algos to 64M 3.5 min cold; a warm one-test mpirun 5 s (export OMPI_ALLOW_RUN_AS_ROOT=1 and
# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 for mpirun outside this script); `build ar-pdl ar-relaunch` (tests filtered,
# PDL_ROUNDS=0, four grids) 2.5 min cold; the same with RELAUNCH_CFGS (4 settings, 3 algos to 64M) 3.5 min cold; `build
# comm-domain` (BUILD_TARGET=braid, 2 rounds x 2 settings, 64K-256M) 2.3 min cold; with five DOMAIN_ENVS at 64M 2.9 min.
# Next on 2x H100: `ar-pdl` (the bf16 band).
# Fifty-fifth session (seven calls, 2x H200, ~1620 s): `build strands-stack` (BUILD_TARGET="braid test_strands_mpi",
# STACK_MODELS="llama3-70b mixtral-8x7b" STACK_THROTTLES=1) 5.5 min cold; warm `strands-smres` + `strands-mixtral` (one
# throttle each, under $OUT/s1 and $OUT/m1) 2.1 min; `build bench-comm` (BUILD_TARGET=braid, COMM_IMPLS=nccl,nccl-ce,
# peer-ce COMM_OPS=allgather,alltoall COMM_MIN=16M COMM_MAX=64M COMM_RESERVES="0 8") 2.2 min cold; `build
# test` (BUILD_TARGET="braid test_layer_mpi", CTEST_R='test_layer_mpi$') + two 70B NVLink `bench strands` by hand
# (--comm nccl-ce and nccl, --iters 5 --rounds 3 --no-graph, pairs profiled) 2.6 min; the same nccl-ce run alone 2.1 min.
# Next on a 2-GPU machine: the 70B layer at full NVLink over NCCL's copy engines against NCCL's kernels, several runs,
# more rounds (the exposure, 3-6% of a pass, is below the compute reference's noise in one run): `build strands-ce`
# with CE_COMMS="nccl-ce nccl" CE_MODELS=llama3-70b SMRES_CE=0 STRANDS_ROUNDS=8 STRANDS_ITERS=10 CE_T=300, twice; then the
# Mixtral stack and layers at 2 CTAs (weight 0 against 0.4: it lost twice without -smres at 2 CTAs).
# After any acceptance run: name its JSON files under the card in bench/results/acceptance.json and regenerate
# docs/acceptance.md (python3 scripts/acceptance.py --markdown docs/acceptance.md): the verdicts come from the files.
# On H100 the DHelix items profile their own pair tables (pairs_for, below): commit them under bench/results/h100x2/
# for the next H100 call. On 2x H100 (ask `nvidia-h100-x2`, and `nvidia-h100-x4` with NGPU=2 on two of its cards:
# check `nvidia-smi -L` shows H100 and `nvidia-smi topo -m` NV18 between GPU0 and GPU1, e.g. `if
# nvidia-smi -L | grep -q H100 && nvidia-smi topo -m | awk '$1=="GPU0"{print $3}' | grep -q NV18; then NGPU=2 ...;
# fi`): `build test measure-rs` with CTEST_R='test_overlap_mpi$|test_t3_mpi$', MEASURE_SHAPES=bench/shapes/within2x-h100x2.txt
# OVERLAP_TRANSPORT=peer-copy-engine MEASURE_ARGS="--tune-candidates 6 --pce-reserves 16,0 --pce-modes copies,stores
# --owner --owner-chunks 1,2,4 --auto" (25 shapes, ~4 min warm; issue 4's open criterion, 1.364x at e9566f7 without
# T3's ops or the pull); then the whole sweep in halves, `sweep-t3` (T3_ALGOS=sequential,flashoverlap,t3-ring-dma,t3-auto
# T3_AG=0), `sweep-ar`, issue 3's `ar-stamps` with ONESTEP_CFGS="BRAID_AR_1STEP_PULL16=1 BRAID_AR_1STEP_PULL16=0"
# STAMP_ALGOS=nccl,int4-1step,int6-1step STAMP_MIN=16M STAMP_MAX=64M, and `strands-stack` (issue 9 on the acceptance
# card: STACK_MODELS="llama3-70b mixtral-8x7b" STACK_THROTTLES="1 2", twice (the stacks' strands-corun-moves-2link-dag
# hid 73.6-74.1% (70B) and 75.2-76.6% (Mixtral) on 2x H200 at either link priority, fifty-first session),
# and issue 3's `ar-ll128 ar-table peers` (the LL128 one-shot met the bf16 band on 2x H200 in graph replays, fiftieth
# session), and the one-layer 70B and Mixtral benches at 1 CTA (`strands-smres` with SMRES_NVLINK=0, `strands-mixtral`
# with MIXTRAL_THROTTLES=1: the pool-moves arena met issue 9 on one 70B layer on 2x H200, fifty-third session), and
# issue 9 at full NVLink: `strands-ce` with CE_COMMS="nccl-ce nccl" CE_MODELS=llama3-70b SMRES_CE=0 STRANDS_ROUNDS=8
# STRANDS_ITERS=64 CE_T=300 (the layer's collectives on NCCL's copy engines; 8 iterations per pass, fifty-sixth session). On `nvidia-h100-x1` (if lent): `build gemm-variant`
# with VARIANTS="st0:BRAID_OVERLAP_TMA_STORE=0" on bench/shapes/sweep.txt (issue 4's ">= 95% of cuBLAS" on H100).
# The thirty-fifth session's calls: one H200 `build test gemm-variant` (BUILD_TARGET="braid test_overlap_gemm_gpu",
# sweep, 2 rounds at VARIANT_T=150) 9.4 min cold, the sweep cut at 37/30 shapes per binary; 2x H200 `build
# strands-stack` (BUILD_TARGET="braid test_strands_mpi", test + 70B stack at 1 CTA and NVLink) 3.5 min cold (build 2.4
# min); `build strands-stack` (BUILD_TARGET=braid, three caps incl. a 2-CTA profile) 3.9 min cold; `strands-stack` at
# two caps, 3 rounds, 60 s warm.
# The thirty-fourth session's calls (2x H200): `build gemm-variant tma-suite` (full build, 3 variants compiled at once,
# 10 shapes x 4 binaries, then tests per mode) hit 600 s after mode 2's tests (full build ~2 min, variants 36 s, each
# 10-shape run ~10 s, a mode's test_overlap|test_t3 ~1.3 min + its relink); warm `build gemm-variant tma-suite` (2
# variants, TMA_MODES=3) 7.7 min; `gemm-variant` 3 rounds 2 min warm; `build test` (BUILD_TMA=3, 27 entries) 4.2 min.
# The device tool returns at most 8 files and bundles nothing if the call hits its limit: keep DEADLINE below it.
# The thirty-third session's calls: 2x H200 `build test gemm-variant` (full ctest, one variant, 10 shapes x 2 rounds)
# 6.8 min cold; one H200 `build gemm-variant` (17 shapes x 2 rounds) 7.1-8.3 min cold; 2x H200 `build gemm-variant`
# with BUILD_TARGET=braid (no tests built), 10 shapes, one round: 3.6 min cold. The device budget counts the cold start.
# The thirty-second session's calls (2x H200): `build test t3-regions measure-rs` (4 tests, 3 region counts, 10 shapes
# with --auto --pull) 4.3 min cold; t3-regions alone 14 s warm (4 shapes, 1 region, twice); 4 fixed sleeps x 3 region
# counts x 10 shapes 58 s warm; `build test owner-phases t3-regions` + measure-rs (10 shapes) 5.1 min cold; `build
# test t3-regions` (test_t3_mpi, 3 + 2 + 1 region runs) 3.2 min cold, 1.4 min warm; `sweep-t3` (4 algos, 50 shapes,
# T3_AG=0) 2.2 min warm.
# The thirty-first session's calls: 2x H200 `build test owner-phases t3-regions` (6 tests) 5.3 min cold; 4x H200 `build
# test` (CTEST_R='_np4$', 5 tests) 7.4 min cold (build 2.4 min); t3-regions + owner-phases 35 s warm; t3-regions on 6
# large shapes 56 s; measure-rs on 4 large shapes 61 s; a 2x H200 call that exited at once ~45 s held; 1x H100 `build
# gemm-cublas` (50 shapes) 6.6 min cold (build 2.7 min); gemm-cublas again 2.8 min warm (38 shapes before DEADLINE=170).
# Earlier (thirtieth session's end): Not GPU-run then, run since: tests/common/capture.hpp; OwnerOrderedRs::set_profile.
# The thirtieth session's calls (all 2x H200): `build test measure-rs` part 1/2 7.3 min cold; part
# 2/2 + peers-tp 4.6 min warm; `owner-stores ar-stamps` 2.1 min warm; `build test` (2 tests) 3.1 min cold; `build
# gemm-cublas` (11 large shapes) 3.5 min cold; gemm-cublas on 12 and on 32 shapes 49 s and 75 s warm. A call that
# finds the wrong card and exits at once still costs ~35 s of held time.
# The twenty-ninth session's calls: a first call stopped at configure (no .deps in a fresh checkout: run
# `bash scripts/setup.sh --stage` first); 2x H100 `build test gemm-variant gemm-layout` (CTEST_R 3 tests, 12 shapes x
# 2 builds x 2 rounds, --no-tune) 9.3 min cold (gemm-layout reached 1 shape); `build test measure-rs` part 1/2 5 min
# warm; part 2/2 + peers-tp 4.3 min warm; `allreduce` 43 s warm; a 64-MiB one-step run 10 s; `build` + 12 shapes with
# --owner-chunks 1,2,4 --auto 3.7 min cold.
# The twenty-eighth session's calls: 2x H200 `build test measure-rs sweep-ar` (test_overlap_mpi, 12 AR shapes, 2 RS
# shapes with CLOCK_LOG) 7.7 min cold; 4x H200 `build test measure-rs` part 1/2 (CTEST_R=test_overlap_mpi: 2.6 min
# of tests at 2 and 4 ranks) 7.7 min cold; 2x H200 `build test measure-rs` part 1/2 (CTEST_R='test_overlap_mpi$|
# test_t3_mpi$|test_harness') 7.3 min cold; part 2/2 4 min warm.
# The twenty-seventh session's calls (2x H200): `build test measure-rs` part 1/2 with --auto 5.8 min cold; part 2/2 +
# peers-tp 4.1 min warm; full sweep-ar with --owner --auto > 7 min (48/50 shapes in 415 s); `build test measure-rs sweep-ar`
# (2 RS shapes, ar-few) 5.1 min cold.
# The twenty-sixth session's calls: `build test measure-rs` (2x H200, part 1/2 with --owner --owner-chunks 1,4)
# 6.3 min cold; part 2/2 + peers-tp 3.8 min warm; on 4x H200 `build test rs-stores` 6.1 min cold (start included in
# held time, ~40 s), measure-rs halves 2.2 / 2.9 min warm; a full ctest at 4 GPUs needs more than 5.5 min.
# On 2x H100 (when served): all of it first, then `build test ar-1step`, `strands-smres`.
# Do not tar $OUT again in the device command: this script bundles every *.jsonl/*.tsv/*.txt into
# $OUT/results.tgz and removes them (twenty-third session: a second `tar czf results.tgz` overwrote three
# calls' JSON; their run.logs survived).
set -uo pipefail
out=${1:?OUT folder}; shift
what=${*:-build test allreduce peers transitions}
export BRAID_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
log="$out/run.log"
has() { [[ " $what " == *" $1 "* ]]; }
# NGPU=2 on a bigger host: the first two GPUs only (CUDA_VISIBLE_DEVICES=0,1 for every rank and every script), e.g.
# to run the 2-GPU criteria on 2 of a 4x H100 host's cards (check `nvidia-smi topo -m` shows NV18 between them).
ngpu=$(nvidia-smi -L | wc -l)
if [[ -n ${NGPU:-} ]] && (( NGPU < ngpu )); then
  ngpu=$NGPU; export CUDA_VISIBLE_DEVICES=$(seq -s, 0 $(( NGPU - 1 )))
fi
# The node's card as bench/results names its folders (h100x2, h200x2, ...).
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | sed -nE 's/.*(H100|H200).*/\1/p' | tr H h)
card=${card:-unknown}x$ngpu
# Issue 8's within-2x shapes of this card (bench/shapes/within2x-<card>.txt; H200's where the card has none).
within2x=bench/shapes/within2x-$card.txt
[[ -f $within2x ]] || within2x=bench/shapes/within2x-h200x2.txt
# DHelix's committed pair tables are profiled on one card: pairs_for NAME gives "--pairs bench/results/$card/NAME"
# where this card has NAME, else a table of NAME's stem (NAME without its -<sha>.txt; the last by name) committed for
# this card, else the table an earlier run of this call profiled, else "--out $out/<stem>-$card.txt" (the run profiles
# its own pairs and writes the table, bundled below) — never another card's timings (an H100 run with the H200
# tables would plan from the wrong operator times).
pairs_for() {
  local stem=${1%-*} f=$1
  [[ -f bench/results/$card/$f ]] || f=$(ls "bench/results/$card" 2>/dev/null | grep -E "^${stem}-[0-9a-f]{7}\.txt$" | tail -1)
  if [[ -n $f ]]; then echo "--pairs bench/results/$card/$f"
  elif [[ -s $out/$stem-$card.txt ]]; then echo "--pairs $out/$stem-$card.txt"  # profiled earlier in this call
  else echo "--out $out/$stem-$card.txt"; fi
}
# Extra environment for one run: `E="NCCL_MAX_CTAS=16" mpi ...` (each NAME=VALUE is exported to every rank).
# Every run also stops before DEADLINE (seconds since the script started; the device call's limit).
t0=$SECONDS
left() { local l=$(( ${DEADLINE:-570} - (SECONDS - t0) )); echo $(( l < 5 ? 5 : l )); }
mpi() {
  local xs=() kv t
  for kv in ${E:-}; do xs+=(-x "$kv"); done
  t=${T:-300}; (( t > $(left) )) && t=$(left)
  # The watchdog (BRAID_DEADLINE_S) ends a hung run with a message naming it, before `timeout` kills it.
  timeout "$t" mpirun -np "$ngpu" --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE \
    -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x BRAID_COMMIT -x BRAID_DEADLINE_S=$(( t > 10 ? t - 5 : t )) \
    "${xs[@]}" "${BIN:-build/braid}" "$@"
}
# build_variants TU "tag:DEF[,DEF...] ..." [soft]: scripts/build-variant.sh for every spec at once (build/braid-TAG, with
# TU — one source path or several, comma-separated — compiled with the extra definitions); their tags in the array
# `tags`. A variant that does not build ends the run, or with `soft` is reported and left out of `tags`.
build_variants() {
  local tu=$1 spec vt defs built=()
  tags=()
  for spec in $2; do
    vt=${spec%%:*}; defs=${spec#*:}
    echo "== variant build $vt: ${defs//,/ } ($(date +%T))" | tee -a "$log"
    rm -f "build/braid-$vt"
    # shellcheck disable=SC2086
    bash scripts/build-variant.sh build "$tu" "$vt" ${defs//,/ } > "$out/build-variant-$vt.log" 2>&1 &
    tags+=("$vt")
  done
  wait
  for vt in "${tags[@]}"; do
    if [[ -x build/braid-$vt ]]; then built+=("$vt"); continue; fi
    echo "variant $vt did not build" | tee -a "$log"; tail -20 "$out/build-variant-$vt.log"
    [[ ${3:-} == soft ]] || exit 1
  done
  tags=("${built[@]}")
}
# ar_tests LABEL LOGFILE FILTER: test_allreduce_mpi's tests matching the gtest FILTER at every GPU, into $out/LOGFILE;
# the verdict lines go to the run log.
ar_tests() {
  echo "== $1 ($(date +%T))" | tee -a "$log"
  timeout 240 mpirun -np "$ngpu" --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x BRAID_COMMIT \
    build/tests/collectives/test_allreduce_mpi --gtest_filter="$3" > "$out/$2" 2>&1
  echo "test rc=$?" | tee -a "$log"
  grep -E "^\[  (PASSED|FAILED) |Failure|wrong" "$out/$2" | sort -u | head -20 | tee -a "$log"
}
if has build; then
  echo "== build ($(date +%T))" | tee -a "$log"
  # A warm machine's build directory may hold another epilogue mode (tma-suite cut short): back to BUILD_TMA (default 3).
  if [[ -f build/CMakeCache.txt ]] && ! grep -q "^BRAID_OVERLAP_TMA_STORE:STRING=${BUILD_TMA:-3}$" build/CMakeCache.txt; then
    cmake -B build -DBRAID_OVERLAP_TMA_STORE="${BUILD_TMA:-3}" > /dev/null
  fi
  if [[ -n ${BUILD_TARGET:-} ]]; then  # only these targets (e.g. braid: no tests), for a short call
    # shellcheck disable=SC2086
    { make configure && cmake --build build -j 32 --target $BUILD_TARGET; } > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  else
    make build JOBS=32 > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  fi
fi
if has t3-diag; then  # one ring case at every GPU, line-buffered so a kill keeps what was printed
  echo "== t3 ring diagnostics, $ngpu ranks" | tee -a "$log"
  for c in Shapes/T3RsMpi.MatchesCublasPlusNccl/0 Shapes/T3RsMpi.MatchesCublasPlusNccl/2; do
    timeout 75 mpirun -np "$ngpu" --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE \
      stdbuf -oL -eL build/tests/t3/test_t3_mpi --gtest_filter="$c" 2>&1 | grep -vE "^\[ *(RUN|OK) *\]" | tail -40 | tee -a "$log"
    echo "-- $c rc=${PIPESTATUS[0]}" | tee -a "$log"
  done
fi
if has t3-cases; then  # each T3 case alone at every GPU, bounded (a stuck case names itself)
  echo "== test_t3_mpi case by case, $ngpu ranks" | tee -a "$log"
  cases="$(for i in $(seq 0 14); do echo Shapes/T3RsMpi.MatchesCublasPlusNccl/$i; done) T3AgMpi.MatchesNcclPlusCublas"
  for c in $cases; do
    # A failing case is run again with eager module loading: if that passes, lazy loading is still
    # involved (docs/t3.md). The watchdog (45 s) names a stuck case before `timeout` kills it.
    for load in "" EAGER; do
      [[ -n $load ]] && ! grep -q "FAILED\|rc=[1-9]" "$out/t3-case.log" 2>/dev/null && continue
      : > "$out/t3-case.log"
      CUDA_MODULE_LOADING=${load:-LAZY} BRAID_TEST_DEADLINE_S=45 timeout 60 mpirun -np "$ngpu" --oversubscribe \
        --bind-to none -x NCCL_NVLS_ENABLE -x CUDA_MODULE_LOADING -x BRAID_TEST_DEADLINE_S \
        stdbuf -oL -eL build/tests/t3/test_t3_mpi --gtest_filter="$c" > "$out/t3-case.log" 2>&1
      rc=$?
      echo "rc=$rc" >> "$out/t3-case.log"
      echo "-- $c module-loading=[${load:-LAZY}] rc=$rc" | tee -a "$log"
      grep -E "FAILED|Failure|counters|timed out|rank [0-9]|braid" "$out/t3-case.log" | sort -u | head -20 | tee -a "$log"
    done
  done
  rm -f "$out/t3-case.log"
fi
if has test-overlap; then  # the FlashOverlap GPU tests alone (both transports)
  echo "== ctest overlap ($(date +%T))" | tee -a "$log"
  (cd build && timeout "$(left)" ctest --output-on-failure --timeout 200 -R "test_overlap" > "$out/ctest-overlap.log" 2>&1)
  echo "ctest rc=$?" | tee -a "$log"
  grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*" "$out/ctest-overlap.log" | tee -a "$log"
fi
if has test; then
  echo "== ctest ($(date +%T))" | tee -a "$log"
  (cd build && timeout "$(left)" ctest --output-on-failure --timeout 300 ${CTEST_E:+-E "$CTEST_E"} ${CTEST_R:+-R "$CTEST_R"} > "$out/ctest.log" 2>&1)
  echo "ctest rc=$?" | tee -a "$log"
  grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*" "$out/ctest.log" | tee -a "$log"
fi
if has barrier-ab; then  # barrier_block's two orderings (SignalView::barrier_mode, BRAID_BARRIER): tests, then A/B
  echo "== barrier A/B: tests with BRAID_BARRIER=release ($(date +%T))" | tee -a "$log"
  (cd build && BRAID_BARRIER=release timeout "$(left)" ctest --output-on-failure --timeout 200 -R "allreduce|runtime|t3" \
    -E "np4|np8" > "$out/ctest-barrier-release.log" 2>&1)
  echo "ctest rc=$?" | tee -a "$log"
  grep -E "tests passed|tests failed|Failed|\*\*\*|Passed" "$out/ctest-barrier-release.log" | tee -a "$log"
  for m in fence release; do
    echo "-- BRAID_BARRIER=$m" | tee -a "$log"
    E="BRAID_BARRIER=$m" T=150 mpi bench allreduce --graph --algo nccl,oneshot,twoshot,oneshot-sym,twoshot-sym,int8 \
      -b 64K -e 64M -f 4 --json "$out/allreduce-barrier-$m.jsonl" 2>&1 | tee -a "$log"
  done
  for b in ${SYMM_BLOCKS:-24 66 132}; do  # fewer blocks (PyTorch's two-shot launches 24 x 1024 threads)
    echo "-- BRAID_BARRIER=${AB_MODE:-release} BRAID_AR_TWOSHOT_BLOCKS=$b" | tee -a "$log"
    E="BRAID_BARRIER=${AB_MODE:-release} BRAID_AR_TWOSHOT_BLOCKS=$b" T=100 mpi bench allreduce --graph \
      --algo nccl,twoshot,oneshot-sym,twoshot-sym -b 1M -e 64M -f 4 --json "$out/allreduce-blocks-$b.jsonl" 2>&1 | tee -a "$log"
  done
fi
if has ar-ll128; then  # the LL128 one-shot: its tests, then the bf16 band (64 KiB - 16 MiB) beside NCCL, graph and direct
  ar_tests "ar-ll128 tests" test-ll128.log "${LL128_TESTS:-*LL128*:*ExactOneShot*:*CapturedInACudaGraph*}"
  for r in $(seq 1 "${LL128_ROUNDS:-2}"); do
    for g in --graph ""; do
      m=${g:+graph}; m=${m:-direct}
      echo "-- ar-ll128 $m round $r" | tee -a "$log"
      T=90 mpi bench allreduce $g --algo "${LL128_ALGOS:-nccl,oneshot-ll,oneshot-ll128,oneshot,twoshot}" \
        -b "${LL128_MIN:-64K}" -e "${LL128_MAX:-16M}" -f 2 --json "$out/allreduce-ll128-$m-r$r.jsonl" 2>&1 \
        | grep -E "^ +[0-9]|wrong|error" | tee -a "$log"
    done
  done
fi
if has ar-pdl; then  # programmatic dependent launch of the one-shots (LL, LL128): tests, then the bf16 band with
  # BRAID_AR_PDL=0/1 timed three ways — events around each call, PDL_BATCH calls back to back per event pair
  # (nccl-tests' way; --lead long enough that the host queues every timed call first), CUDA graph replays.
  [[ ${PDL_TESTS:-} == none ]] ||
    ar_tests "ar-pdl tests" test-pdl.log "${PDL_TESTS:-*ProgrammaticDependent*:*LL128*:*ExactOneShot*:*CapturedInACudaGraph*}"
  for r in $(seq 1 "${PDL_ROUNDS:-2}"); do
    for pdl in ${PDL_MODES:-0 1}; do
      for m in ${PDL_TIMING:-call batch graph}; do
        case $m in
          call) a=() ;;
          batch) a=(--batch "${PDL_BATCH:-16}" --iters 30 --lead 40000) ;;
          graph) a=(--graph) ;;
        esac
        echo "-- ar-pdl BRAID_AR_PDL=$pdl $m round $r" | tee -a "$log"
        E="BRAID_AR_PDL=$pdl" T=90 mpi bench allreduce "${a[@]}" --algo "${PDL_ALGOS:-nccl,oneshot-ll128,oneshot-ll}" \
          -b "${PDL_MIN:-64K}" -e "${PDL_MAX:-16M}" -f 2 --json "$out/allreduce-${PDL_TAG:-}pdl$pdl-$m-r$r.jsonl" 2>&1 \
          | grep -E "^ +[0-9]|wrong|error" | tee -a "$log"
      done
    done
  done
fi
if has ar-relaunch; then  # where a call's relaunch goes: per call / back to back / replayed at a few grid sizes
  # RELAUNCH_CFGS: environment settings to compare ("none" = defaults; e.g. "none BRAID_AR_REMOTE_DOMAIN=1")
  k=0
  for cfg in ${RELAUNCH_CFGS:-none}; do
    k=$((k + 1))
    for b in ${RELAUNCH_BLOCKS:-0 1 2 4}; do
      for m in call batch graph; do
        case $m in
          call) a=() ;;
          batch) a=(--batch 16 --iters 30 --lead 40000) ;;
          graph) a=(--graph) ;;
        esac
        e=""; [[ $b != 0 ]] && e="BRAID_AR_LL128_BLOCKS=$b"; [[ $cfg != none ]] && e="$e $cfg"
        tag=""; [[ $cfg != none ]] && tag="${cfg//=/-}-"; [[ ${RELAUNCH_CFGS:-none} == none ]] || tag="$k-$tag"
        echo "-- ar-relaunch ${cfg} blocks=${b/#0/default} $m" | tee -a "$log"
        E="$e" T=60 mpi bench allreduce "${a[@]}" --algo "${RELAUNCH_ALGOS:-nccl,oneshot-ll128}" -b 64K \
          -e "${RELAUNCH_MAX:-1M}" -f 4 --json "$out/allreduce-relaunch-${tag}b$b-$m.jsonl" 2>&1 \
          | grep -E "^ +[0-9]|wrong|error" | tee -a "$log"
      done
    done
  done
fi
if has ar-table; then  # the exact algorithms' tuning table (tuning/allreduce.tsv's rows), then the graph band
  echo "== ar-table ($(date +%T))" | tee -a "$log"
  T=200 mpi bench allreduce --algo "${TABLE_ALGOS:-nccl,oneshot-ll,oneshot-ll128,oneshot,twoshot}" -b 64K -e "${TABLE_MAX:-1G}" \
    -f 2 --json "$out/allreduce-table.jsonl" --write-table "$out/allreduce-table.tsv" 2>&1 | grep -E "^ +[0-9]|wrong|error" \
    | tee -a "$log"
  T=150 mpi bench allreduce --graph --algo nccl,oneshot-ll,oneshot-ll128,oneshot,twoshot,oneshot-sym,twoshot-sym \
    -b 64K -e "${GRAPH_MAX:-64M}" -f 2 --json "$out/allreduce-graph.jsonl" 2>&1 | grep -E "^ +[0-9]|wrong|error" | tee -a "$log"
fi
if has ar-grid; then  # all-reduce grid knobs at 256 KiB - 4 MiB in graph replays (issue 3's 1.5x band)
  for v in "" ${AR_GRID:-BRAID_AR_LL_MIN_VECS=256 BRAID_AR_LL_MIN_VECS=128 BRAID_AR_ONESHOT_MIN_VECS=256 BRAID_AR_ONESHOT_MIN_VECS=128}; do
    echo "-- ar-grid env=[$v]" | tee -a "$log"
    E="$v" T=60 mpi bench allreduce --graph --algo nccl,oneshot-ll,oneshot,twoshot -b 256K -e 4M -f 2 \
      --json "$out/allreduce-grid-$(echo "${v:-default}" | tr "=" "-").jsonl" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
  done
  for l in blocked interleaved; do  # run_symmetric's block layout, against PyTorch's two-shot from 16 MiB
    echo "-- ar-grid BRAID_AR_SYMM_LAYOUT=$l" | tee -a "$log"
    E="BRAID_AR_SYMM_LAYOUT=$l" T=90 mpi bench allreduce --algo nccl,twoshot,oneshot-sym,twoshot-sym -b 4M -e 256M -f 4 \
      --json "$out/allreduce-symm-$l.jsonl" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
  done
fi
if has ctest-new; then  # only the suites of the components still being brought up
  echo "== ctest (t3, overlap, layer)" | tee -a "$log"
  (cd build && ctest --output-on-failure --timeout 240 -R "t3|overlap|layer" > "$out/ctest-new.log" 2>&1)
  echo "ctest rc=$?" | tee -a "$log"
  grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*|Passed" "$out/ctest-new.log" | tee -a "$log"
fi
if has ctest-mod; then  # suites of the components changed since the last GPU run
  CTEST_R=${CTEST_R:-t3|overlap|layer|model|allreduce}  # (not inside the pipeline below: a subshell)
  echo "== ctest ($CTEST_R)" | tee -a "$log"
  (cd build && timeout "$(left)" ctest --output-on-failure --timeout 240 -R "$CTEST_R" > "$out/ctest-mod.log" 2>&1)
  echo "ctest rc=$?" | tee -a "$log"
  grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*|Passed" "$out/ctest-mod.log" | tee -a "$log"
fi
if has overlap-diag; then  # FlashOverlap under NCCL variants (BRAID_OVERLAP_DEBUG: see overlap.cu), then T3
  echo "== gemm-rs diagnostics" | tee -a "$log"
  for v in "NCCL_PROTO=Simple|--reserve-sms 16" "NCCL_MAX_CTAS=16|--reserve-sms 24" "BRAID_OVERLAP_DEBUG=nowait|--reserve-sms 0"; do
    echo "-- variant env=[${v%%|*}] opts=[${v#*|}]" | tee -a "$log"
    # shellcheck disable=SC2086
    E="${v%%|*}" T=120 mpi bench gemm-rs --shape 16384,8192,1024 ${v#*|} --iters 10 2>&1 | tee -a "$log"
  done
  T=200 mpi bench t3-gemm-rs --shape 16384,8192,1024 --shape 8192,8192,4096 --json "$out/t3-gemm-rs.jsonl" 2>&1 | tee -a "$log"
fi
if has overlap; then
  echo "== bench gemm-rs (FlashOverlap)" | tee -a "$log"
  for v in "|--reserve-sms 16" "NCCL_MAX_CTAS=16|--reserve-sms 16" "NCCL_MAX_CTAS=8|--reserve-sms 16" \
           "NCCL_MAX_CTAS=16|--reserve-sms 16 --groups 4,8,8,8" "NCCL_MAX_CTAS=32|--reserve-sms 32"; do
    echo "-- variant env=[${v%%|*}] opts=[${v#*|}]" | tee -a "$log"
    # shellcheck disable=SC2086
    E="${v%%|*}" T=180 mpi bench gemm-rs --shape 16384,8192,1024 ${v#*|} --json "$out/gemm-rs-explore.jsonl" 2>&1 | tee -a "$log"
  done
fi
if has t3; then
  echo "== bench t3-gemm-rs, ag-gemm" | tee -a "$log"
  T=240 mpi bench t3-gemm-rs --shape 16384,8192,1024 --shape 8192,8192,4096 --json "$out/t3-gemm-rs.jsonl" 2>&1 | tee -a "$log"
  T=240 mpi bench ag-gemm --shape 16384,8192,1024 --shape 8192,8192,4096 --json "$out/ag-gemm.jsonl" 2>&1 | tee -a "$log"
fi
if has attn; then  # cuDNN fused attention against braid's kernels (docs/layer.md)
  echo "== attention: cuDNN vs naive" | tee -a "$log"
  cmake -LA -N build 2>/dev/null | grep -E "^(CUDNN_|BRAID_CUDNN|BRAID_WITH_CUDNN)" | tee -a "$log"
  (cd build && ctest -V --timeout 300 -R "layer_gpu" > "$out/ctest-attn.log" 2>&1)
  echo "ctest rc=$?" | tee -a "$log"
  grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*|Passed|attention" "$out/ctest-attn.log" | tee -a "$log"
  for impl in cudnn naive; do
    echo "-- BRAID_ATTN=$impl" | tee -a "$log"
    E="BRAID_ATTN=$impl" T=300 mpi bench layer --model llama3-70b --tp 2 --seq 8192 --backward \
      --json "$out/layer-attn.jsonl" 2>&1 | tee -a "$log"
  done
fi
if has layer; then
  echo "== bench layer" | tee -a "$log"
  T=240 mpi bench layer --model llama3-8b --tp 2 --seq 4096 --backward --json "$out/layer.jsonl" 2>&1 | tee -a "$log"
  T=240 mpi bench layer --model llama3-70b --tp 2 --seq 8192 --backward --json "$out/layer.jsonl" 2>&1 | tee -a "$log"
fi
if has layer-capacity; then  # MoE capacity factor (static, no host wait) against dropless: bench layer, alternating
  echo "== bench layer, MoE capacity factors ($(date +%T))" | tee -a "$log"
  for round in 1 2; do
    for cap in ${CAPACITIES:-0 1.25}; do
      T=200 mpi bench layer --model "${CAP_MODEL:-mixtral-8x7b}" --tp "$ngpu" --seq "${CAP_SEQ:-4096}" --backward \
        --capacity "$cap" --json "$out/layer-capacity.jsonl" 2>&1 | tee -a "$log"
    done
  done
fi
if has layer-moe-sizes; then  # dropless MoE, host counts against device counts: bench layer (per operator), alternating
  echo "== bench layer, MoE sizes host / device ($(date +%T))" | tee -a "$log"
  for round in 1 2; do
    for ms in host device; do
      T=150 mpi bench layer --model "${CAP_MODEL:-mixtral-8x7b}" --tp "$ngpu" --seq "${CAP_SEQ:-4096}" --backward \
        --moe-sizes "$ms" ${LAYER_ARGS:-} --json "$out/layer-moe-sizes.jsonl" 2>&1 | tee -a "$log"
    done
  done
fi
if has moe-tile; then  # the grouped GEMM's tile / cluster / schedule (moe_gemm_impl.cuh's macros): variant builds of its
  # three translation units, then bench layer (per operator; it verifies first) with device counts, base and each
  # variant, and host counts (cuBLAS per expert) once per round. MOE_TILES="tag:DEF[,DEF...] ..." (default below).
  build_variants src/model/moe_gemm_fprop.cu,src/model/moe_gemm_dgrad.cu,src/model/moe_gemm_wgrad.cu \
    "${MOE_TILES:-"t256:BRAID_MOE_TILE_M=256,BRAID_MOE_TILE_N=128 pp:BRAID_MOE_PINGPONG=1,BRAID_MOE_TILE_M=128,BRAID_MOE_TILE_N=128"}" soft
  for round in $(seq 1 "${MOE_TILE_ROUNDS:-2}"); do
    for v in host base "${tags[@]}"; do
      bin=build/braid; [[ $v != base && $v != host ]] && bin=build/braid-$v
      ms=device; [[ $v == host ]] && ms=host
      echo "-- [$v] round $round ($(date +%T))" | tee -a "$log"
      BIN=$bin T=100 mpi bench layer --model "${CAP_MODEL:-mixtral-8x7b}" --tp "$ngpu" --seq "${CAP_SEQ:-4096}" --backward \
        --moe-sizes "$ms" --json "$out/moe-tile-$v.jsonl" 2>&1 | grep -E "verification|^(forward|backward) +(expert_(gate|down)|[0-9])" | tee -a "$log"
    done
  done
fi
if has strands; then  # DHelix: strands vs single strand vs round-robin (verified first), throttled link
  echo "== bench strands" | tee -a "$log"
  (cd build && timeout 240 ctest --output-on-failure --timeout 200 -R "test_strands" > "$out/ctest-strands.log" 2>&1)
  grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*|Passed" "$out/ctest-strands.log" | tee -a "$log"
  T=120 mpi bench strands --model llama3-70b --tp 2 --seq 4096 --iters ${STRANDS_ITERS:-10} --rounds ${STRANDS_ROUNDS:-5} \
    --warmup 2 --out "$out/pairs-llama3-70b.txt" \
    --plan-out "$out/plan-llama3-70b.txt" --json "$out/strands.jsonl" 2>&1 | tee -a "$log"
  T=120 mpi bench strands --model mixtral-8x7b --tp 2 --ep 2 --seq 4096 --iters ${STRANDS_ITERS:-10} \
    --rounds ${STRANDS_ROUNDS:-5} --warmup 2 --json "$out/strands.jsonl" 2>&1 | tee -a "$log"
  T=150 mpi bench strands --model llama3-70b --tp 2 --seq 4096 --throttle 1 --iters ${STRANDS_ITERS:-10} \
    --rounds ${STRANDS_ROUNDS:-5} --warmup 2 \
    --out "$out/pairs-llama3-70b-throttled.txt" --json "$out/strands.jsonl" 2>&1 | tee -a "$log"
fi
if has strands-mixtral; then  # DHelix on the MoE layer: strands tests, then Mixtral EP=2 with the pool variants
  # (STRANDS_ARGS: extra bench strands arguments here and in strands-stack, e.g. "--capacity 1.25"; STRANDS_NO_GRAPH=
  # (empty) keeps the CUDA-graph variants here, which an MoE model runs only with a capacity factor)
  echo "== strands (Mixtral EP=2, NVLink and throttled, GEMMs leaving ${SMRES_THROTTLED:-4} SMs)" | tee -a "$log"
  (cd build && timeout 120 ctest --output-on-failure --timeout 100 -R "test_strands" > "$out/ctest-strands.log" 2>&1)
  grep -E "tests passed|tests failed|Failed|\*\*\*|Passed" "$out/ctest-strands.log" | tee -a "$log"
  for thr in ${MIXTRAL_THROTTLES:-0 1}; do  # NCCL CTAs per communicator (0: none); e.g. MIXTRAL_THROTTLES="0 2"
    T=${MIXTRAL_T:-300} mpi bench strands --model mixtral-8x7b --tp 2 --ep 2 --seq 4096 --throttle $thr \
      --iters ${STRANDS_ITERS:-10} --rounds ${STRANDS_ROUNDS:-3} --warmup 2 ${STRANDS_NO_GRAPH---no-graph} \
      --gemm-sm-reserve ${SMRES_THROTTLED:-4} ${STRANDS_ARGS:-} --json "$out/strands-mixtral.jsonl" 2>&1 | tee -a "$log"
  done
fi
if has strands-quick; then  # DHelix: the strands tests, then the throttled 70B case only (~1.5 min)
  echo "== strands (quick: tests + throttled llama3-70b)" | tee -a "$log"
  (cd build && timeout 120 ctest --output-on-failure --timeout 100 -R "test_strands" > "$out/ctest-strands.log" 2>&1)
  grep -E "tests passed|tests failed|Failed|\*\*\*|Passed" "$out/ctest-strands.log" | tee -a "$log"
  T=150 mpi bench strands --model llama3-70b --tp 2 --seq 4096 --throttle 1 --iters ${STRANDS_ITERS:-10} \
    --rounds ${STRANDS_ROUNDS:-5} --warmup 2 \
    --out "$out/pairs-llama3-70b-throttled.txt" --json "$out/strands.jsonl" 2>&1 | tee -a "$log"
fi
if has strands-smres; then  # DHelix: GEMMs leaving SMs to the collectives (-smres), the co-run-model order
  echo "== strands with --gemm-sm-reserve ($(date +%T))" | tee -a "$log"
  # STRANDS_THROTTLE: NCCL CTAs of the throttled run (1: ~14.5 GB/s busbw; 2 is closer to a PCIe Gen4 x16
  # link). The committed pair table was profiled at 1 CTA; at another throttle the run profiles its own.
  thr=${STRANDS_THROTTLE:-1}; pairs=()
  [[ $thr == 1 ]] && read -ra pairs <<< "$(pairs_for strands-pairs-llama3-70b-throttled-e782a52.txt)"
  T=${SMRES_T:-200} mpi bench strands --model llama3-70b --tp 2 --seq 4096 --throttle $thr --iters ${STRANDS_ITERS:-10} \
    --rounds ${STRANDS_ROUNDS:-5} --warmup 2 --no-graph --gemm-sm-reserve ${SMRES_THROTTLED:-4} ${pairs[@]+"${pairs[@]}"} \
    --json "$out/strands-smres-throttled.jsonl" 2>&1 | tee -a "$log"
  [[ ${SMRES_NVLINK:-16} != 0 ]] && T=${SMRES_T:-200} mpi bench strands --model llama3-70b --tp 2 --seq 4096 \
    --iters ${STRANDS_ITERS:-10} --rounds ${STRANDS_ROUNDS:-5} --warmup 2 --no-graph \
    --gemm-sm-reserve ${SMRES_NVLINK:-16} --json "$out/strands-smres-nvlink.jsonl" 2>&1 | tee -a "$log"
fi
if has strands-stack; then  # DHelix over a stack of layers (StrandStack, bench strands --layers): its test (STACK_TEST=1),
  # then each of STACK_MODELS (default llama3-70b; mixtral-8x7b runs with --ep 2) at each NCCL CTA cap of STACK_THROTTLES
  # (default "1 0"; 0 = NVLink; the 70B layer at 1 and 0 uses committed pair tables, every other case profiles its own
  # and writes it under $out), for each of STACK_LAYERS (default 20); GEMMs leave SMRES_THROTTLED (4) SMs throttled and
  # SMRES_NVLINK (16) on NVLink in the -smres variants.
  echo "== strands stack ($(date +%T))" | tee -a "$log"
  if [[ ${STACK_TEST:-1} == 1 ]]; then
    (cd build && timeout 150 ctest --output-on-failure --timeout 120 -R "test_strands_mpi" > "$out/ctest-strands.log" 2>&1)
    grep -E "tests passed|tests failed|Failed|\*\*\*|Passed" "$out/ctest-strands.log" | tee -a "$log"
  fi
  for model in ${STACK_MODELS:-llama3-70b}; do
    ep=(); [[ $model == mixtral* ]] && ep=(--ep 2)
    for nl in ${STACK_LAYERS:-20}; do
      for thr in ${STACK_THROTTLES:-1 0}; do
        pairs=(--out "$out/strands-pairs-$model-throttle$thr.txt"); res=${SMRES_THROTTLED:-4}
        [[ $thr == 0 ]] && res=${SMRES_NVLINK:-16}
        if [[ $model == llama3-70b ]]; then
          [[ $thr == 1 ]] && read -ra pairs <<< "$(pairs_for strands-pairs-llama3-70b-throttled-e782a52.txt)"
          [[ $thr == 0 ]] && read -ra pairs <<< "$(pairs_for strands-pairs-llama3-70b-92f3048.txt)"
        fi
        echo "-- $model, stack of $nl layers, NCCL CTAs ${thr/#0/unlimited} ($(date +%T))" | tee -a "$log"
        T=${STACK_T:-240} mpi bench strands --model $model --tp 2 ${ep[@]+"${ep[@]}"} --seq 4096 --throttle $thr --layers $nl \
          --iters ${STACK_ITERS:-3} --rounds ${STACK_ROUNDS:-2} --warmup 1 --no-graph --gemm-sm-reserve $res "${pairs[@]}" ${STRANDS_ARGS:-} \
          --json "$out/strands-stack.jsonl" 2>&1 |
          grep -vE "^ +[0-9]+ |^# (budgeted|best issue|co-run|pool-bounded|static two|ideal|executor model)" | tee -a "$log"
      done
    done
  done
fi
if has pipeline; then  # DHelix PP executor: W-shaped vs 1F1B vs no pipelining, one stage per rank, verified
  echo "== bench pipeline ($(date +%T))" | tee -a "$log"
  [[ -n "${PIPE_NOTEST:-}" ]] || (cd build && timeout 240 ctest --output-on-failure --timeout 200 -R "test_pipeline" > "$out/ctest-pipeline.log" 2>&1)
  [[ -n "${PIPE_NOTEST:-}" ]] || grep -E "tests passed|tests failed|Failed|\*\*\*|Passed" "$out/ctest-pipeline.log" | tee -a "$log"
  # PIPE_NOTEST=1 skips the tests; PIPE_MS (micro-batch counts), PIPE_LPCS (layers per W chunk), PIPE_ROUNDS, PIPE_T (seconds a run), PIPE_ARGS
  # (e.g. --w-si corun,fb,bf).
  # PIPE_RA: a list of --recv-ahead values, each its own run (file suffix -ra<k>), rounds interleaved.
  for r in $(seq 1 "${PIPE_ROUNDS:-1}"); do
    for pm in ${PIPE_MS:-${PIPE_M:-8}}; do
      for lpc in ${PIPE_LPCS:-1 2}; do
        for ra in ${PIPE_RA:-none}; do
          ra_arg=(); sfx=""
          [[ "$ra" == none ]] || { ra_arg=(--recv-ahead "$ra"); sfx="-ra$ra"; }
          T=${PIPE_T:-150} mpi bench pipeline --model llama3-8b --seq 4096 --microbatches "$pm" --layers-per-chunk $lpc \
            --iters 5 --warmup 2 ${PIPE_ARGS:-} "${ra_arg[@]}" --json "$out/pipeline-m$pm-lpc$lpc$sfx-r$r.jsonl" 2>&1 | tee -a "$log"
        done
      done
    done
  done
fi
if has allreduce; then
  echo "== bench allreduce" | tee -a "$log"
  mpi bench allreduce --algo nccl,oneshot-ll,oneshot,twoshot,int8,int6,int4,int8-nccl -b 64K -e 1G -f 2 \
    --json "$out/allreduce.jsonl" --write-table "$out/allreduce.tsv" 2>&1 | tee -a "$log"
  mpi bench allreduce --graph --algo nccl,oneshot-ll,oneshot,twoshot,oneshot-sym,twoshot-sym -b 64K -e 16M -f 2 \
    --json "$out/allreduce-graph.jsonl" 2>&1 | tee -a "$log"
  # the symmetric-buffer paths (run_symmetric) beside the workspace ones, direct launches, to 256 MiB
  mpi bench allreduce --algo nccl,oneshot,twoshot,oneshot-sym,twoshot-sym -b 64K -e 256M -f 4 \
    --json "$out/allreduce-sym.jsonl" 2>&1 | tee -a "$log"
  for d in student-t outlier; do
    mpi bench allreduce --algo nccl,int8,int6,int4 -b 4M -e 64M -f 16 --dist $d --json "$out/allreduce-dists.jsonl" \
      2>&1 | tee -a "$log"
  done
fi
if has ar-ce; then  # run_symmetric's one-shot by copy engines: its test, then against the SM paths and NCCL
  echo "== test_allreduce_mpi ($(date +%T))" | tee -a "$log"
  (cd build && timeout 120 ctest --output-on-failure --timeout 110 -R "test_allreduce_mpi" > "$out/ctest-ar-ce.log" 2>&1)
  echo "ctest rc=$?" | tee -a "$log"
  grep -E "tests passed|tests failed|Failed|\*\*\*|FAILED" "$out/ctest-ar-ce.log" | tee -a "$log"
  for l in blocked interleaved; do
    echo "-- BRAID_AR_SYMM_LAYOUT=$l, direct launches" | tee -a "$log"
    E="BRAID_AR_SYMM_LAYOUT=$l" T=120 mpi bench allreduce --algo nccl,twoshot,oneshot-sym,twoshot-sym,oneshot-ce-sym \
      -b 1M -e 256M -f 2 --json "$out/allreduce-ce-$l.jsonl" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
  done
  for c in ${CE_CHUNKS:-2097152 8388608}; do
    echo "-- BRAID_AR_CE_CHUNK_BYTES=$c" | tee -a "$log"
    E="BRAID_AR_CE_CHUNK_BYTES=$c" T=90 mpi bench allreduce --algo nccl,oneshot-ce-sym -b 4M -e 256M -f 4 \
      --json "$out/allreduce-ce-chunk-$c.jsonl" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
  done
  echo "-- graph replays" | tee -a "$log"
  E="BRAID_AR_SYMM_LAYOUT=interleaved" T=90 mpi bench allreduce --graph --algo nccl,oneshot,twoshot,oneshot-sym,twoshot-sym,oneshot-ce-sym \
    -b 1M -e 64M -f 2 --json "$out/allreduce-ce-graph.jsonl" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
fi
if has ar-batch; then  # run_symmetric's paired-source loads (BRAID_AR_SYMM_BATCH) A/B, two rounds, then graphs
  for round in 1 2; do
    for bt in ${AR_BATCH:-none oneshot}; do
      echo "-- BRAID_AR_SYMM_BATCH=$bt, round $round, direct launches ($(date +%T))" | tee -a "$log"
      E="BRAID_AR_SYMM_BATCH=$bt" T=90 mpi bench allreduce --algo nccl,oneshot-sym,twoshot-sym -b 1M -e 256M -f 2 \
        --json "$out/allreduce-batch-$bt-r$round.jsonl" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
    done
  done
  for bt in ${AR_BATCH:-none oneshot}; do
    echo "-- BRAID_AR_SYMM_BATCH=$bt, graph replays" | tee -a "$log"
    E="BRAID_AR_SYMM_BATCH=$bt" T=60 mpi bench allreduce --graph --algo nccl,oneshot-sym,twoshot-sym -b 1M -e 64M -f 2 \
      --json "$out/allreduce-batch-$bt-graph.jsonl" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
  done
fi
if has ar-qpair; then  # the fused quantized kernel's stage-2 load order (BRAID_AR_QUANT_PAIR) A/B, two rounds
  for round in 1 2; do
    for qp in 0 1; do
      echo "-- BRAID_AR_QUANT_PAIR=$qp, round $round ($(date +%T))" | tee -a "$log"
      E="BRAID_AR_QUANT_PAIR=$qp" T=90 mpi bench allreduce --algo nccl,int8,int6,int4 -b 4M -e 256M -f 4 \
        --json "$out/allreduce-qpair$qp-r$round.jsonl" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
    done
  done
fi
if has p2p; then  # peer copy rates, one way and both ways at once (P2P_BYTES, P2P_BLOCKS, P2P_CHUNKS: a list)
  for k in ${P2P_CHUNKS:-1}; do
    for dir in "" --bidir; do
      echo "== bench p2p $dir --chunks $k ($(date +%T))" | tee -a "$log"
      # shellcheck disable=SC2086
      T=90 mpi bench p2p --bytes "${P2P_BYTES:-64M}" --blocks "${P2P_BLOCKS:-32,66,132,264}" --chunks "$k" $dir \
        --json "$out/p2p${dir:+-bidir}-chunks$k.jsonl" 2>&1 | grep -E "^ +[a-z]|^#" | tee -a "$log"
    done
  done
fi
if has ar-1step; then  # the one-step quantized all-reduce (int8/int6/int4-1step): its test, then beside the two-step
  if ! has test; then  # `test` already ran every ctest entry in this call
    echo "== test_allreduce_mpi ($(date +%T))" | tee -a "$log"
    (cd build && timeout 150 ctest --output-on-failure --timeout 140 -R "test_allreduce" > "$out/ctest-ar-1step.log" 2>&1)
    echo "ctest rc=$?" | tee -a "$log"
    grep -E "tests passed|tests failed|Failed|\*\*\*|FAILED" "$out/ctest-ar-1step.log" | tee -a "$log"
  fi
  for round in 1 2; do  # round 1 also writes the table rows it measured (every precision's fastest)
    echo "-- round $round ($(date +%T))" | tee -a "$log"
    wt=(); (( round == 1 )) && wt=(--write-table "$out/allreduce-1step-table.tsv")
    T=150 mpi bench allreduce --algo nccl,int8,int8-1step,int6,int6-1step,int4,int4-1step -b 1M -e 256M -f 2 \
      --json "$out/allreduce-1step-r$round.jsonl" "${wt[@]}" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
  done
  for d in student-t outlier; do
    T=60 mpi bench allreduce --algo nccl,int8,int8-1step,int6,int6-1step,int4,int4-1step -b 64M -e 64M --dist $d \
      --json "$out/allreduce-1step-dists.jsonl" 2>&1 | grep -E "^ +[0-9]" | tee -a "$log"
  done
fi
# The one-step A/B items: the all-reduce test, then each configuration (NAME=VALUE,... of BRAID_AR_1STEP_*
# variables, ONESTEP_CFGS or the item's default) for two rounds. $1 item, $2 default configurations, $3
# algorithms, $4 / $5 smallest / largest size, $6 extra bench flags.
onestep_ab() {
  if ! has test && ! has ar-1step; then  # otherwise the all-reduce tests already ran in this call
    echo "== test_allreduce_mpi ($(date +%T))" | tee -a "$log"
    (cd build && timeout 150 ctest --output-on-failure --timeout 140 -R "test_allreduce_mpi$" > "$out/ctest-$1.log" 2>&1)
    echo "ctest rc=$?" | tee -a "$log"
    grep -E "tests passed|tests failed|Failed|\*\*\*|FAILED" "$out/ctest-$1.log" | tee -a "$log"
  fi
  local round c tag=${1#ar-}
  for round in 1 2; do
    for c in ${ONESTEP_CFGS:-$2}; do
      echo "-- [$c] round $round ($(date +%T))" | tee -a "$log"
      # shellcheck disable=SC2086
      E="${c//,/ }" T=60 mpi bench allreduce --algo "$3" -b "$4" -e "$5" -f 4 $6 \
        --json "$out/allreduce-$tag-${c//[,=]/-}-r$round.jsonl" 2>&1 | grep -E "^ +[0-9]|stamps" | tee -a "$log"
    done
  done
}
if has ar-1pipe; then  # the pipelined one-step kernel: step sizes / lag / unroll A/B
  onestep_ab ar-1pipe "BRAID_AR_1STEP_ITERS=0,BRAID_AR_1STEP_WIDE=0 BRAID_AR_1STEP_ITERS=0,BRAID_AR_1STEP_WIDE=1 BRAID_AR_1STEP_ITERS=8,BRAID_AR_1STEP_WIDE=1 BRAID_AR_1STEP_ITERS=8,BRAID_AR_1STEP_WIDE=0" \
    nccl,int8,int8-1step,int4,int4-1step 4M 256M ""
fi
if has ar-variant; then  # A/B of compile-time all-reduce variants: AR_VARIANTS="tag:DEF[,DEF...] ..." (or one variant as
  # VARIANT_DEFS, e.g. "BRAID_AR_X=0", tag `variant`) on the all-reduce translation unit builds build/braid-TAG
  # (scripts/build-variant.sh, the compiles at once); the base binary and every variant run the same bench in
  # alternation, VARIANT_ROUNDS rounds (default 2; VARIANT_ALGOS, VARIANT_MIN/MAX, VARIANT_F). Used in the twentieth
  # session for the conversion-free code arithmetic, the sixty-third for cache hints (BRAID_AR_CACHE_HINTS).
  build_variants src/collectives/allreduce.cu "${AR_VARIANTS:-"variant:$(tr ' ' ',' <<< "${VARIANT_DEFS:?AR_VARIANTS or VARIANT_DEFS}")"}"
  if ! has test && ! has ar-1step; then
    (cd build && timeout 150 ctest --output-on-failure --timeout 140 -R "test_allreduce" > "$out/ctest-ar-variant.log" 2>&1)
    echo "ctest rc=$?" | tee -a "$log"
    grep -E "tests passed|tests failed|Failed|\*\*\*|FAILED" "$out/ctest-ar-variant.log" | tee -a "$log"
  fi
  for round in $(seq 1 "${VARIANT_ROUNDS:-2}"); do
    for v in base "${tags[@]}"; do
      bin=build/braid; [[ $v != base ]] && bin=build/braid-$v
      echo "-- [$v] round $round ($(date +%T))" | tee -a "$log"
      BIN=$bin T=90 mpi bench allreduce --algo "${VARIANT_ALGOS:-nccl,int8,int8-1step,int6,int6-1step,int4,int4-1step}" \
        -b "${VARIANT_MIN:-4M}" -e "${VARIANT_MAX:-256M}" -f "${VARIANT_F:-4}" --json "$out/allreduce-variant-$v-r$round.jsonl" 2>&1 \
        | grep -E "^ +[0-9]" | tee -a "$log"
    done
  done
fi
if has gemm-variant; then  # the plain GEMM, base build against variants of gemm_sm90.cu, alternating, one machine:
  # VARIANTS="tag:DEF[,DEF...] ..." (e.g. "st0:BRAID_OVERLAP_TMA_STORE=0 nost:BRAID_OVERLAP_EPILOGUE_STORES=0"), or
  # one variant as VARIANT_TAG + VARIANT_DEFS (default nostores: BRAID_OVERLAP_EPILOGUE_STORES=0); GEMM_SHAPES a shapes
  # file, VARIANT_ROUNDS rounds (default 2), VARIANT_T seconds per run (default 120). Every row verifies braid's GEMM
  # against cuBLAS (bench tolerance) and the FlashOverlap op against cuBLAS + NCCL, so each variant's output is checked.
  build_variants src/overlap/gemm_sm90.cu \
    "${VARIANTS:-"${VARIANT_TAG:-nostores}:$(tr ' ' ',' <<< "${VARIANT_DEFS:-BRAID_OVERLAP_EPILOGUE_STORES=0}")"}"
  for round in $(seq 1 "${VARIANT_ROUNDS:-2}"); do
    for v in base "${tags[@]}"; do
      bin=build/braid; [[ $v != base ]] && bin=build/braid-$v
      echo "-- [$v] round $round ($(date +%T))" | tee -a "$log"
      # shellcheck disable=SC2086
      BIN=$bin T=${VARIANT_T:-120} mpi bench gemm-rs --shapes "${GEMM_SHAPES:-bench/shapes/a2a-few.txt}" --iters 20 ${VARIANT_ARGS:-} \
        --json "$out/gemm-variant-$v-r$round.jsonl" 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ \||Failed" | tee -a "$log"
      python3 -c "import json,math,sys; rs=[json.loads(l) for l in open(sys.argv[1])]; \
g=lambda v: math.exp(sum(map(math.log, v)) / len(v)); \
print('[%s] every row correct: %s' % (sys.argv[2], all(r.get('correct') for r in rs))); \
[print('[%s] %s geomean %.3f min %.3f below 0.95: %d (%d shapes)' % (sys.argv[2], k, g(v), min(v), sum(x < 0.95 for x in v), len(v))) \
 for k in ('braid_vs_cublas', 'braid_best_vs_cublas') for v in [[r[k] for r in rs if k in r]] if v]" \
        "$out/gemm-variant-$v-r$round.jsonl" "$v" 2>&1 | tee -a "$log"
    done
  done
fi
if has ncu-gemm; then  # braid's plain GEMM and cuBLAS's under Nsight Compute (Firecracker machines read the counters),
  # one shape: NCU_SHAPE (default 1024,4096,1024), NCU_TILE (128x256), each binary of NCU_BINS ("base" = build/braid, a
  # tag = build/braid-TAG from gemm-variant), the first NCU_COUNT (8) launches of GEMM kernels (CUTLASS's
  # GemmUniversal, cuBLAS's nvjet/xmma) of a 3-iteration gemm-rs row. Writes ncu-gemm-V-details.txt (duration, speed of
  # light, warp states, ...) and ncu-gemm-V-sass.txt (per kernel, the SASS lines with the most stall samples).
  # NCU_ARGS replaces the bench arguments, e.g. T3's kernel at one rank: NCU_KERNELS=T3Epilogue NCU_ARGS="t3-gemm-rs
  # --shape 1024,4096,1024 --algo t3-ring --rounds 1 --iters 3 --warmup 1".
  for v in ${NCU_BINS:-base}; do
    bin=build/braid; [[ $v != base ]] && bin=build/braid-$v
    echo "== ncu gemm [$v] ${NCU_SHAPE:-1024,4096,1024} ${NCU_TILE:-128x256} ($(date +%T))" | tee -a "$log"
    t=$(( $(left) < 150 ? $(left) : 150 ))
    timeout "$t" mpirun -np 1 --bind-to none -x NCCL_NVLS_ENABLE -x BRAID_COMMIT ncu --clock-control none \
      --kernel-name-base mangled --kernel-name "regex:${NCU_KERNELS:-GemmUniversal|nvjet|xmma}" --launch-count "${NCU_COUNT:-8}" \
      --set full --import-source no -f -o "$out/ncu-gemm-$v" "$bin" bench ${NCU_ARGS:-gemm-rs --shape "${NCU_SHAPE:-1024,4096,1024}" \
      --tile "${NCU_TILE:-128x256}" --no-tune --iters 3 --warmup 1} > "$out/ncu-gemm-$v-run.txt" 2>&1
    echo "-- rc=$? $(grep -c "==PROF==" "$out/ncu-gemm-$v-run.txt") profiler lines" | tee -a "$log"
    ncu --import "$out/ncu-gemm-$v.ncu-rep" --page details > "$out/ncu-gemm-$v-details.txt" 2>&1
    grep -E "^  [a-zA-Z_].*\(|Duration|Elapsed Cycles|Registers Per|Compute \(SM\) Throughput|Memory Throughput" \
      "$out/ncu-gemm-$v-details.txt" | cut -c1-160 | tee -a "$log"
    ncu --import "$out/ncu-gemm-$v.ncu-rep" --page source --csv --print-source sass > "$out/ncu-gemm-$v-sass-all.csv" 2>&1
    python3 scripts/ncu-sass-top.py "$out/ncu-gemm-$v-sass-all.csv" > "$out/ncu-gemm-$v-sass.txt" 2>&1
    head -60 "$out/ncu-gemm-$v-sass.txt" | tee -a "$log"
    # The raw table gzipped under a .txt name, so that the bundle below (results.tgz takes *.txt) carries it.
    gzip -f "$out/ncu-gemm-$v-sass-all.csv" && mv "$out/ncu-gemm-$v-sass-all.csv.gz" "$out/ncu-gemm-$v-sass-all.csv.gz.txt"
    rm -f "$out/ncu-gemm-$v.ncu-rep"
  done
fi
if has tma-suite; then  # the FlashOverlap and T3 tests with each store mode of the GEMM epilogue (TMA_MODES, default
  # "0": the non-default one; TMA_CTEST_R, default test_overlap|test_t3). The mode is gemm_sm90.cu's definition alone (CMakeLists.txt), so
  # each mode recompiles that file and relinks; the build directory goes back to the default (3) at the end.
  for m in ${TMA_MODES:-0}; do
    echo "== ctest with BRAID_OVERLAP_TMA_STORE=$m ($(date +%T))" | tee -a "$log"
    if ! { cmake -B build -DBRAID_OVERLAP_TMA_STORE="$m" && cmake --build build -j 32; } >> "$out/build-tma.log" 2>&1; then
      echo "build failed (mode $m)" | tee -a "$log"; tail -20 "$out/build-tma.log" | tee -a "$log"; continue
    fi
    echo "---- mode $m" >> "$out/ctest-tma.log"
    (cd build && timeout "$(left)" ctest --output-on-failure --timeout 200 -R "${TMA_CTEST_R:-test_overlap|test_t3}" \
      -E "np4|np8" > "$out/ctest-tma-$m.part" 2>&1)
    echo "ctest rc=$? (mode $m)" | tee -a "$log"
    grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest-tma-$m.part" | tee -a "$log"
    cat "$out/ctest-tma-$m.part" >> "$out/ctest-tma.log"; rm -f "$out/ctest-tma-$m.part"
  done
  { cmake -B build -DBRAID_OVERLAP_TMA_STORE=3 && cmake --build build -j 32; } >> "$out/build-tma.log" 2>&1
fi
if has owner-phases; then  # the owner-ordered op's phase boundaries (set_profile) on the small within-2x shapes
  echo "== owner-ordered op: phase stamps ($(date +%T))" | tee -a "$log"
  # shellcheck disable=SC2086
  T=300 mpi bench gemm-rs --shapes "${PHASE_SHAPES:-bench/shapes/owner-small.txt}" --iters 20 --transport peer-copy-engine \
    --no-tune --owner --owner-chunks ${PHASE_CHUNKS:-1,2} --owner-phases ${PHASE_ARGS:-} --json "$out/owner-phases.jsonl" 2>&1 \
    | grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ \||owner-ordered:|phases|Failed|rror" | tee -a "$log"
fi
if has t3-regions; then  # T3's ring ops on the small within-2x shapes at 1, 2, 4 regions per chunk (T3_REGIONS; 0 = each
  # variant's default, t3::pick_regions). One run per region count, the same shapes, every row verified.
  for rg in ${T3_REGIONS:-1 2 4}; do
    echo "== t3-gemm-rs --regions $rg ($(date +%T))" | tee -a "$log"
    E="${T3_REGION_ENV:-}" T=150 mpi bench t3-gemm-rs --algo sequential,t3-ring-cublas,t3-ring-dma --shapes "${T3_REGION_SHAPES:-bench/shapes/owner-small.txt}" \
      --regions "$rg" --iters 20 --json "$out/t3-regions-$rg.jsonl" 2>&1 | grep -vE "^#|^$" | tee -a "$log"
  done
fi
if has cublaslt; then  # cuBLAS's configurations for GEMM shapes (bench gemm-cublaslt, one GPU): cuBLASLt's top LT_ALGOS
  # (default 8) heuristic picks per shape of LT_SHAPES, each verified and timed beside cublasGemmEx, enum values named
  # by scripts/cublaslt-names.py from the toolkit's header (the table goes to cublaslt.txt and run.log)
  echo "== cuBLASLt picks against cublasGemmEx ($(date +%T))" | tee -a "$log"
  NGPU_SAVE=$ngpu; ngpu=1
  T=${LT_T:-240} mpi bench gemm-cublaslt --shapes "${LT_SHAPES:-bench/shapes/gemm-short.txt}" --algos "${LT_ALGOS:-8}" \
    --iters 50 --json "$out/gemm-cublaslt.jsonl" 2>&1 | grep -vE "^$" | tee -a "$log"
  ngpu=$NGPU_SAVE
  python3 scripts/cublaslt-names.py "$out/gemm-cublaslt.jsonl" \
    --header "$(dirname "$(dirname "$(command -v nvcc)")")/include/cublasLt.h" > "$out/cublaslt.txt" 2>&1
  tee -a "$log" < "$out/cublaslt.txt"
fi
if has gemm-cublas; then  # braid's GEMM against cuBLAS, timed interleaved (bench gemm-rs, --no-tune), on GEMM_SHAPES
  echo "== braid GEMM vs cuBLAS, interleaved ($(date +%T))" | tee -a "$log"
  # shellcheck disable=SC2086
  T=300 mpi bench gemm-rs --shapes "${GEMM_SHAPES:-bench/shapes/gemm-largek.txt}" --iters 20 --no-tune ${GEMM_ARGS:-} \
    --json "$out/gemm-cublas.jsonl" 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ \||Failed|rror" | tee -a "$log"
  # braid_vs_cublas: the op's tile; braid_best_vs_cublas: the better of braid's two tiles (rows since the thirty-first session)
  python3 -c "import json,math,sys; rs=[json.loads(l) for l in open(sys.argv[1])]; \
g=lambda v: math.exp(sum(map(math.log, v)) / len(v)); \
[print('%s geomean %.3f min %.3f below 0.95: %d (%d shapes)' % (k, g(v), min(v), sum(x < 0.95 for x in v), len(v))) \
 for k in ('braid_vs_cublas', 'braid_best_vs_cublas') for v in [[r[k] for r in rs if k in r]] if v]" \
    "$out/gemm-cublas.jsonl" 2>&1 | tee -a "$log"
fi
if has ar-stamps; then  # one-step phase stamps (bench --phases) and A/B of kernels (STAMP_ALGOS, STAMP_MIN/MAX)
  onestep_ab ar-stamps "BRAID_AR_1STEP_RU=1 BRAID_AR_1STEP_ITERS=0,BRAID_AR_1STEP_WIDE=1 BRAID_AR_1STEP_ITERS=1073741824,BRAID_AR_1STEP_WIDE=0,BRAID_AR_1STEP_RU=2 BRAID_AR_1STEP_ITERS=1073741824,BRAID_AR_1STEP_WIDE=0,BRAID_AR_1STEP_RU=4 BRAID_AR_1STEP_ITERS=8,BRAID_AR_1STEP_WIDE=0,BRAID_AR_1STEP_RU=4" \
    "${STAMP_ALGOS:-nccl,int8-1step,int4-1step}" "${STAMP_MIN:-16M}" "${STAMP_MAX:-64M}" --phases
fi
if has qar; then  # the pipelined quantized all-reduce: bit-exact test (unless ctest-mod ran it), A/B bench
  if ! has ctest-mod; then
    echo "== test_allreduce_mpi (classic + pipelined)" | tee -a "$log"
    (cd build && ctest --output-on-failure --timeout 600 -R "test_allreduce_mpi|test_allreduce_table" \
      > "$out/ctest-qar.log" 2>&1)
    echo "ctest rc=$?" | tee -a "$log"
    grep -E "tests passed|tests failed|Failed|\*\*\*|FAILED" "$out/ctest-qar.log" | tee -a "$log"
  fi
  echo "== bench allreduce: classic vs pipelined" | tee -a "$log"
  T=400 mpi bench allreduce --algo nccl,int8-classic,int8-pipe,int6-classic,int6-pipe,int4-classic,int4-pipe \
    -b 1M -e 256M -f 4 --json "$out/allreduce-qar.jsonl" 2>&1 | tee -a "$log"
  for v in "BRAID_AR_PIPE_BLOCKS=264" "BRAID_AR_PIPE_MIN_ROUNDS=4" "BRAID_AR_PIPE_BLOCKS=132"; do
    echo "-- variant env=[$v]" | tee -a "$log"
    E="$v" T=200 mpi bench allreduce --algo nccl,int8-pipe,int6-pipe,int4-pipe -b 16M -e 64M -f 4 \
      --json "$out/allreduce-qar-variants.jsonl" 2>&1 | tee -a "$log"
  done
fi
if has ar-phases; then  # Flash Communication ablation: each phase of the NCCL-transport path alone
  echo "== bench allreduce --phases" | tee -a "$log"
  T=200 mpi bench allreduce --algo nccl,int8,int6,int4,int8-nccl,int6-nccl,int4-nccl -b 4M -e 256M -f 4 --phases \
    --json "$out/allreduce-phases.jsonl" 2>&1 | tee -a "$log"
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
if has sweep-rs; then
  echo "== gemm-rs sweep (bench/shapes/sweep.txt)" | tee -a "$log"
  T=400 mpi bench gemm-rs --shapes bench/shapes/sweep.txt --iters 10 --transport ${OVERLAP_TRANSPORT:-kernels} --json "$out/gemm-rs-sweep.jsonl" 2>&1 | tee -a "$log"
fi
if has sweep-t3; then
  echo "== t3-gemm-rs sweep (bench/shapes/sweep.txt)" | tee -a "$log"
  # T3_ALGOS: a subset of the algorithms (default: all); T3_AG=0 skips the AG+GEMM sweep.
  # T3_RS=0 skips the GEMM+RS sweep.
  [[ ${T3_RS:-1} == 1 ]] && T=400 mpi bench t3-gemm-rs --shapes bench/shapes/sweep.txt --iters 10 ${T3_ALGOS:+--algo $T3_ALGOS} \
    --json "$out/t3-gemm-rs-sweep.jsonl" 2>&1 | tee -a "$log"
  [[ ${T3_AG:-1} == 1 ]] && T=300 mpi bench ag-gemm --shapes bench/shapes/sweep.txt --iters 10 \
    --json "$out/ag-gemm-sweep.jsonl" 2>&1 | tee -a "$log"
fi
if has t3-swizzle; then  # T3 GEMM+RS on the within-2x shapes under several environments (swizzle, L2 window)
  # T3_CONFIGS: space-separated TAG=NAME=VALUE,NAME=VALUE (TAG alone: no extra environment). T3_SHAPES: the shape
  # file (default: the 2x H200 within-2x set). direct-tma's segment A/B: T3_ALGOS=sequential,t3-direct-tma
  # T3_CONFIGS="seg0=BRAID_T3_SEGMENT_ROWS=0 segdef seg2048=BRAID_T3_SEGMENT_ROWS=2048 seg512=BRAID_T3_SEGMENT_ROWS=512"
  # (0: own chunk first, whole). T3_ARGS: more bench options for every config, e.g. "--regions 2" (with
  # BRAID_T3_SEGMENT_ROWS=512: two segments per chunk on the M <= 2048 shapes, whose default is one region).
  for cfg in ${T3_CONFIGS:-s1 s8=BRAID_T3_SWIZZLE=8 s8p=BRAID_T3_SWIZZLE=8,BRAID_T3_PERSIST_B=1}; do
    tag=${cfg%%=*}; env=""; [[ $cfg == *=* ]] && env=${cfg#*=}
    echo "== t3-gemm-rs within-2x shapes, config $tag [${env}] ($(date +%T))" | tee -a "$log"
    # shellcheck disable=SC2086
    E="${env//,/ }" T=200 mpi bench t3-gemm-rs --shapes "${T3_SHAPES:-$within2x}" --iters 10 ${T3_ARGS:-} \
      --algo ${T3_ALGOS:-sequential,t3-auto,t3-ring-cublas,t3-ring-dma,t3-direct} \
      --json "$out/t3-w2x-$tag.jsonl" 2>&1 | grep -vE "^#" | tail -30 | tee -a "$log"
  done
fi
if has ncu-t3; then  # DRAM bytes per op (issue 8): one profiler range per algo, app-range replay, bounded
  echo "== ncu: DRAM traffic per op (t3-gemm-rs --profile-range)" | tee -a "$log"
  # Default: the shapes where GEMM and reduce-scatter times are within 2x of each other (the acceptance's
  # set); NCU_SHAPES / NCU_ALGOS override. ~10 s per shape on 2x H200. NCU_CONFIGS: as T3_CONFIGS of
  # t3-swizzle (TAG=NAME=VALUE,...; default one config "base" with NCU_ENV); each config's logs go to
  # ncu-TAG/ and its rows to t3-dram-TAG.jsonl.
  algos=${NCU_ALGOS:-sequential,t3-auto,t3-ring-cublas,t3-ring-dma,t3-direct,flashoverlap}
  shapes=${NCU_SHAPES:-$(sed -e 's/#.*//' "$within2x" | tr -d ' ' | grep -v '^$')}
  for cfg in ${NCU_CONFIGS:-base=${NCU_ENV:-}}; do
    tag=${cfg%%=*}; env=""; [[ $cfg == *=* ]] && env=${cfg#*=}; env=${env//,/ }
    mkdir -p "$out/ncu-$tag"
    echo "-- config $tag [$env]" | tee -a "$log"
    for sh in $shapes; do
      t=$(( $(left) < 60 ? $(left) : 60 ))
      (( t <= 10 )) && { echo "-- $sh not run (deadline)" | tee -a "$log"; continue; }
      # shellcheck disable=SC2046
      timeout "$t" mpirun -np "$ngpu" --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x BRAID_DEADLINE_S=$(( t - 5 )) \
        $(for kv in $env; do echo -x "$kv"; done) ncu --clock-control none --replay-mode app-range --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        --csv build/braid bench t3-gemm-rs --shape "$sh" --algo "$algos" --profile-range \
        --iters 1 --warmup 0 > "$out/ncu-$tag/ncu-t3-$sh.txt" 2>&1
      rc=$?
      (( rc != 0 )) && echo "-- $sh rc=$rc" | tee -a "$log"
      grep -E "ERROR|Disposition" "$out/ncu-$tag/ncu-t3-$sh.txt" | head -5 | tee -a "$log"
    done
    BRAID_CARD="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$ngpu" python3 scripts/ncu_dram.py --algos "$algos" \
      --env "$env" --json "$out/t3-dram-$tag.jsonl" "$out/ncu-$tag"/ncu-t3-*.txt 2>&1 | tail -40 | tee -a "$log"
    (cd "$out" && tar czf "ncu-$tag.tgz" --remove-files "ncu-$tag")
  done
fi
if has sweep-a2a; then  # FlashOverlap GEMM + all-to-all (uniform random routing), verified per shape
  echo "== gemm-a2a sweep (${A2A_SHAPES:-bench/shapes/sweep.txt})" | tee -a "$log"
  # A2A_TRANSPORT=both: also over braid's copy-engine pushes (A2aOptions::transport, fields _pce); all: also by
  # the epilogue's stores into the peers' outputs (fields _stores). A2A_SHAPES: another shapes file.
  T=300 mpi bench gemm-a2a --shapes "${A2A_SHAPES:-bench/shapes/sweep.txt}" --iters 10 --transport "${A2A_TRANSPORT:-kernels}" \
    --json "$out/gemm-a2a-sweep.jsonl" 2>&1 | tee -a "$log"
fi
if has sweep-ar; then  # AR_SHAPES: another shapes file (default the sweep)
  echo "== gemm-ar sweep (${AR_SHAPES:-bench/shapes/sweep.txt})" | tee -a "$log"
  # AR_MEASURE=1: measured inputs and decisions per shape (--measure/--cache files in OUT), as measure-rs
  ms=(); [[ ${AR_MEASURE:-0} == 1 ]] && ms=(--measure "$out/ar-inputs.txt" --cache "$out/ar-cache.txt")
  T=420 mpi bench gemm-ar --shapes "${AR_SHAPES:-bench/shapes/sweep.txt}" --iters 10 --transport ${OVERLAP_TRANSPORT:-kernels} \
    "${ms[@]}" ${AR_ARGS:-} --json "$out/gemm-ar-sweep.jsonl" 2>&1 | tee -a "$log"
fi
if has fo-ce-groups; then  # FlashOverlap GEMM+RS over every transport at given partitions (CE_SHAPES; CE_GROUPS:
  # --groups lists of waves per group, e.g. "12,12,12", the last group extended to the GEMM's waves, or
  # "default" for the op's own default partition): the copy-engine transport's cost per group. Runs
  # test_overlap_mpi first unless `test` ran.
  if ! has test; then
    (cd build && timeout 200 ctest --output-on-failure --timeout 190 -R "test_overlap_mpi$" > "$out/ctest-overlap.log" 2>&1)
    echo "ctest rc=$?" | tee -a "$log"
    grep -E "tests passed|tests failed|Failed|\*\*\*|FAILED" "$out/ctest-overlap.log" | tee -a "$log"
  fi
  # CE_RESERVE: SMs the copy-engine op's GEMM leaves free (the bench's --reserve-sms-ce; the copy engines
  # need none, the reduction some; at 0 the sums wait for the GEMM's end), one run per value.
  # CE_TRANSPORT: the bench's --transport (default all; copy-engine = the ring kernels and the copy engines; a
  # comma-separated list, e.g. copy-engine,peer-copy-engine for braid's own copy-engine transport beside NCCL's).
  for sh in ${CE_SHAPES:-16384,8192,1024 16384,8192,4096}; do
    for g in ${CE_GROUPS:-default 12,12,12 6,6,6,6,6,6}; do
      for rsv in ${CE_RESERVE:-default}; do
        # CE_ENVS: one run per entry, back to back (A/B), e.g. "default BRAID_OVERLAP_CE_SUM_STREAM=0"
        for ev in ${CE_ENVS:-default}; do
          echo "-- $sh groups $g reserve $rsv env $ev ($(date +%T))" | tee -a "$log"
          ga=(--groups "$g"); [[ $g == default ]] && ga=()
          [[ $rsv != default ]] && ga+=(--reserve-sms-ce "$rsv")
          [[ $ev == default ]] && ev=""
          E="$ev" T=60 mpi bench gemm-rs --shape "$sh" "${ga[@]}" --transport "${CE_TRANSPORT:-all}" --no-tune \
            --json "$out/fo-ce-groups.jsonl" 2>&1 | tail -4 | tee -a "$log"
        done
      done
    done
  done
fi
if has pce-probe; then  # the peer copy-engine transport's per-call costs by size, no GEMM (bench gemm-rs --probe-pce):
  # setup, copies alone, copies + flags + waits, sum; PROBE_SHAPES bound the sizes (the output of each)
  echo "== pce probe ($(date +%T))" | tee -a "$log"
  shs=(); for sh in ${PROBE_SHAPES:-16384,8192,1024}; do shs+=(--shape "$sh"); done
  T=120 mpi bench gemm-rs "${shs[@]}" --probe-pce --iters 20 --json "$out/pce-probe.jsonl" 2>&1 | tee -a "$log"
  T=60 mpi bench gemm-rs "${shs[@]}" --probe-pce --reserve-sms-ce 0 --iters 20 \
    --json "$out/pce-probe-reserve0.jsonl" 2>&1 | tee -a "$log"
fi
if has measure-rs; then  # FlashOverlap with measured search inputs per shape: the predictor-error report
  # (OVERLAP_TRANSPORT: kernels, symmetric = kernels + symmetric, all = kernels + copy engines + symmetric; a
  # comma-separated list, e.g. symmetric,peer-copy-engine)
  echo "== gemm-rs sweep with --measure (predictor error)" | tee -a "$log"
  # MEASURE_PART=1/2 or 2/2: every other shape of the sweep (two calls for OVERLAP_TRANSPORT=all, ~7 min whole)
  shapes=${MEASURE_SHAPES:-bench/shapes/sweep.txt}  # MEASURE_SHAPES: another shapes file
  if [[ -n ${MEASURE_PART:-} ]]; then
    grep -v '^ *#' "$shapes" | grep . | awk -v p="${MEASURE_PART%/*}" -v n="${MEASURE_PART#*/}" \
      '(NR - 1) % n == p - 1' > "$out/sweep-part.txt"
    shapes="$out/sweep-part.txt"
  fi
  # MEASURE_ENV: environment for the bench, e.g. BRAID_OVERLAP_CE_TAIL=0 (the copy engines' pre-tail model);
  # MEASURE_ARGS: more bench options, e.g. "--tune-candidates 6" (a timed choice among the predictor's candidates),
  # "--pce-reserves 16,0" (the peer copy-engine op measured and tuned at each SM reserve, the best kept)
  # CLOCK_LOG=1: SM and memory clocks, power and temperature every 100 ms beside the run (read only; nothing is set), to see
  # whether the measure phase (long back-to-back runs) runs at lower clocks than the rows' short timed rounds
  # (twenty-third session: at reserve 0 the inputs' GEMM time read 3-27% above the rows' braid GEMM on every SM).
  clk=""
  if [[ ${CLOCK_LOG:-0} == 1 ]]; then
    nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu \
      --format=csv -lms 100 > "$out/clocks.txt" 2>&1 & clk=$!
  fi
  E="${MEASURE_ENV:-}" T=540 mpi bench gemm-rs --shapes "$shapes" --iters 10 --measure "$out/inputs.txt" \
    --transport ${OVERLAP_TRANSPORT:-kernels} ${MEASURE_ARGS:-} \
    --cache "$out/cache.txt" --json "$out/gemm-rs-measured.jsonl" 2>&1 | tee -a "$log"
  [[ -n $clk ]] && kill "$clk" 2>/dev/null
  python3 scripts/predictor_error.py "$out/gemm-rs-measured.jsonl" --json "$out/predictor-error.jsonl" 2>&1 | tail -3 | tee -a "$log"
fi
if has rs-stores; then  # GEMM + RS over the peer transport in several modes, alternating, then torch's fused op, all
  # on RS_SHAPES (default: the GEMM-bound shapes torch won at 1c022b5). RS_VARIANTS: copies (the copy engines),
  # stores (the consumer threads' stores), stores-bulk (--pce-bulk: bulk copies from shared memory, 2 ranks),
  # both (--pce-modes copies,stores: the measured pick per shape), owner (both, and the owner-ordered reduce-scatter:
  # OwnerOrderedRs with cuBLAS's and braid's GEMM; the row's `pick` is the fastest by a separate timing)
  shapes=${RS_SHAPES:-bench/shapes/rs-gemm-bound.txt}
  for round in ${RS_ROUNDS:-1}; do
    for v in ${RS_VARIANTS:-copies stores}; do
      a=(); env=""
      case $v in
        stores) a=(--pce-stores) ;;
        stores-bulk) a=(--pce-stores --pce-bulk) ;;
        both) a=(--pce-modes copies,stores) ;;
        owner) a=(--pce-modes copies,stores --owner) ;;  # plus the owner-ordered RS (cuBLAS, braid), the pick
      esac
      echo "== gemm-rs peer-copy-engine [$v] round $round ($(date +%T))" | tee -a "$log"
      E="$env" T=240 mpi bench gemm-rs --shapes "$shapes" --iters 10 --measure "$out/inputs-$v.txt" \
        --transport peer-copy-engine --tune-candidates 6 --pce-reserves ${RS_RESERVES:-16,0} "${a[@]}" ${RS_ARGS:-} \
        --cache "$out/cache-$v.txt" --json "$out/gemm-rs-$v-r$round.jsonl" 2>&1 | tee -a "$log"
    done
  done
  if [[ ${RS_PEERS:-1} == 1 ]]; then
    echo "== peers: torch fused_matmul_reduce_scatter on $shapes ($(date +%T))" | tee -a "$log"
    timeout "$(left)" python3 -m torch.distributed.run --nproc-per-node "$ngpu" bench/peers/async_tp_symm_mem.py \
      --shapes "$shapes" --which rs --json "$out/peers-rs.jsonl" 2>&1 | grep -vE "^(W|I)[0-9]{4}|warn" | tee -a "$log"
  fi
fi
if has gemm-swizzle; then  # braid GEMM vs cuBLAS at large K under the scheduler's swizzle
  echo "== gemm-rs, BRAID_GEMM_SWIZZLE" | tee -a "$log"
  for sw in ${SWIZZLES:-1 2 4 8}; do
    echo "-- BRAID_GEMM_SWIZZLE=$sw" | tee -a "$log"
    # default: the H100 sweep's worst braid/cuBLAS shapes (N = 16384: 0.77-0.86x, 2c2b4ce) and two at large K
    shs=(); for sh in ${SWIZZLE_SHAPES:-16384,16384,4096 4096,16384,2048 2048,16384,4096 8192,16384,8192 8192,8192,14336 16384,8192,8192}; do shs+=(--shape "$sh"); done
    E="BRAID_GEMM_SWIZZLE=$sw" T=120 mpi bench gemm-rs "${shs[@]}" --iters 10 --json "$out/gemm-swizzle-$sw.jsonl" 2>&1 | tee -a "$log"
  done
fi
if has gemm-layout; then  # braid's GEMM vs cuBLAS per tile config and scheduler raster (BRAID_GEMM_RASTER), on
  # LAYOUT_SHAPES (default: the 12 shapes furthest below cuBLAS, bench/shapes/gemm-worst.txt); the rows' braid_vs_cublas
  echo "== gemm-rs, tile x raster ($(date +%T))" | tee -a "$log"
  for t in ${LAYOUT_TILES:-128x256 128x128}; do
    for r in ${LAYOUT_RASTERS:-n m}; do
      echo "-- tile $t raster $r" | tee -a "$log"
      E="BRAID_GEMM_RASTER=$r" T=150 mpi bench gemm-rs --shapes "${LAYOUT_SHAPES:-bench/shapes/gemm-worst.txt}" --tile "$t" \
        --no-tune --iters 10 --json "$out/gemm-layout-$t-$r.jsonl" 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ \||Fail" | tee -a "$log"
      python3 -c "import json,math,sys; v=[json.loads(l)['braid_vs_cublas'] for l in open(sys.argv[1])]; \
print('braid/cublas geomean %.3f min %.3f (%d shapes)' % (math.exp(sum(map(math.log, v)) / len(v)), min(v), len(v)))" \
        "$out/gemm-layout-$t-$r.jsonl" 2>&1 | tee -a "$log"
    done
  done
fi
if has fo-reserve; then  # FlashOverlap's op per SM reserve (FO_RESERVES, default "0 4 16") on FO_SHAPES (default
  # 4096,4096,1024), FO_ARGS added (e.g. --reserve-fit): the bench row (--no-tune), then its signalled GEMM's kernel
  # durations under Nsight Compute. At one
  # rank this isolates the reserved grid's wave count (512 tiles: 4 waves of 128-132 CTAs, 5 of 116) from any comm.
  for sh in ${FO_SHAPES:-4096,4096,1024}; do
    for r in ${FO_RESERVES:-0 4 16}; do
      echo "== gemm-rs $sh, reserve $r ($(date +%T))" | tee -a "$log"
      # shellcheck disable=SC2086
      T=120 mpi bench gemm-rs --shape "$sh" --reserve-sms "$r" --no-tune --iters 20 ${FO_ARGS:-} --json "$out/fo-reserve.jsonl" 2>&1 \
        | grep -vE "^#" | tail -8 | tee -a "$log"
      t=$(( $(left) < 90 ? $(left) : 90 ))
      timeout "$t" mpirun -np 1 --bind-to none -x NCCL_NVLS_ENABLE ncu --clock-control none --kernel-name-base mangled \
        --kernel-name "regex:GemmUniversal" --launch-count 8 --section LaunchStats --section SpeedOfLight build/braid bench \
        gemm-rs --shape "$sh" --reserve-sms "$r" --no-tune --iters 3 --warmup 1 ${FO_ARGS:-} 2>&1 | grep -E "^  void|Duration|Grid Size" \
        | sed 's/^\(  void device_kernel<GemmUniversal<\).*/\1...>/' | tee -a "$log"
    done
  done
fi
if has t3-np1; then  # T3's GEMM at one rank (no peer, no wait: ring = a plain store of every tile, direct = bf16
  # atomics into the local output) beside cuBLAS and FlashOverlap's GEMM, on T3NP1_SHAPES (default gemm-short)
  for round in ${T3NP1_ROUNDS:-1}; do
    echo "== t3-gemm-rs at one rank, round $round ($(date +%T))" | tee -a "$log"
    T=${T3NP1_T:-150} mpi bench t3-gemm-rs --algo "${T3NP1_ALGOS:-sequential,flashoverlap,t3-ring,t3-direct}" \
      --shapes "${T3NP1_SHAPES:-bench/shapes/gemm-short.txt}" --rounds 3 --json "$out/t3-np1-r$round.jsonl" 2>&1 | tee -a "$log"
  done
fi
if has peers-tp; then  # PyTorch async TP on the sweep shapes
  echo "== peers: torch async TP (fused_matmul_reduce_scatter, fused_all_gather_matmul)" | tee -a "$log"
  timeout "$(left)" python3 -m torch.distributed.run --nproc-per-node "$ngpu" bench/peers/async_tp_symm_mem.py \
    --shapes bench/shapes/sweep.txt --which "${PEERS_WHICH:-rs,ag}" --json "$out/peers-async-tp.jsonl" 2>&1 | grep -vE "^(W|I)[0-9]{4}|warn" | tee -a "$log"
fi
if has layer-more; then  # the 8B dense and Mixtral MoE layers (70B: the attn item)
  echo "== bench layer (8B, Mixtral)" | tee -a "$log"
  T=200 mpi bench layer --model llama3-8b --tp 2 --seq 8192 --backward --json "$out/layer.jsonl" 2>&1 | tee -a "$log"
  T=200 mpi bench layer --model mixtral-8x7b --tp 2 --seq 8192 --moe --backward --json "$out/layer.jsonl" 2>&1 | tee -a "$log"
fi
if has overlap-probe; then  # is the NCCL/GEMM interference SM sharing or the memory system?
  echo "== gemm-rs probes" | tee -a "$log"
  for v in "BRAID_OVERLAP_DEBUG=nowait|--reserve-sms 66" "|--reserve-sms 66" "NCCL_P2P_USE_CUDA_MEMCPY=1|--reserve-sms 16"; do
    echo "-- variant env=[${v%%|*}] opts=[${v#*|}]" | tee -a "$log"
    # shellcheck disable=SC2086
    E="${v%%|*}" T=90 mpi bench gemm-rs --shape 16384,8192,1024 ${v#*|} --iters 10 2>&1 | tee -a "$log"
  done
fi
if has layer-tp; then  # issue 10: the layer at TP = every GPU of the node (Llama-3-70B shapes)
  echo "== bench layer, tp $ngpu" | tee -a "$log"
  T=240 mpi bench layer --model llama3-70b --tp "$ngpu" --seq 8192 --backward --json "$out/layer-tp$ngpu.jsonl" 2>&1 | tee -a "$log"
fi
if has bench-comm; then  # the layer's Comm implementations alone and beside a cuBLAS GEMM (docs/layer.md, bench comm)
  # COMM_RESERVES: SMs the GEMM leaves free, one run each; COMM_IMPLS (nccl, nccl-ce, peer, peer-ce), COMM_OPS,
  # COMM_MIN/COMM_MAX, COMM_GEMM (M,N,K), COMM_ARGS (more bench comm options, e.g. "--ce-in-place 0")
  echo "== bench comm ($(date +%T))" | tee -a "$log"
  for r in ${COMM_RESERVES:-0 8}; do
    T=240 mpi bench comm --comm "${COMM_IMPLS:-nccl,peer,peer-ce}" --op "${COMM_OPS:-allgather,reducescatter,allreduce,alltoall}" \
      -b "${COMM_MIN:-1M}" -e "${COMM_MAX:-256M}" -f 4 ${COMM_ARGS:-} \
      --gemm "${COMM_GEMM:-8192,8192,8192}" --gemm-sm-reserve "$r" --json "$out/bench-comm.jsonl" 2>&1 | tee -a "$log"
  done
fi
if has comm-domain; then  # braid's all-reduce beside a cuBLAS GEMM under each setting of DOMAIN_ENVS (default: its
  # kernels in the default / remote memory synchronization domain), NCCL beside it, DOMAIN_ROUNDS rounds
  # DOMAIN_BINS: the binaries, `base` (build/braid) or variant tags built by ar-variant (build/braid-TAG), in alternation.
  for r in $(seq 1 "${DOMAIN_ROUNDS:-2}"); do
    for b in ${DOMAIN_BINS:-base}; do
      for e in ${DOMAIN_ENVS:-BRAID_AR_REMOTE_DOMAIN=0 BRAID_AR_REMOTE_DOMAIN=1}; do
        echo "-- comm-domain [$b] $e round $r" | tee -a "$log"
        tag=${e//BRAID_AR_/}; tag=${tag//=/}; tag=${tag,,}
        bin=build/braid; [[ $b != base ]] && { bin=build/braid-$b; tag=$b-$tag; }
        BIN=$bin E="$e" T=120 mpi bench comm --comm nccl,allreducer --op allreduce -b "${DOMAIN_MIN:-64K}" \
          -e "${DOMAIN_MAX:-256M}" -f 4 --gemm "${COMM_GEMM:-8192,8192,8192}" --json "$out/bench-comm-$tag-r$r.jsonl" \
          2>&1 | grep -vE "^#|^$" | tee -a "$log"
      done
    done
  done
fi
if has strands-open; then  # DHelix with each pass's opening pair in chunks (-open<K>, fifty-seventh session): one 70B layer
  # at full NVLink over nccl-ce (the eb35616 table; OPEN_NVLINK_ITERS x OPEN_NVLINK_ROUNDS, default 64 x 8) and at 1 CTA
  # (the e782a52 table; STRANDS_ITERS x STRANDS_ROUNDS, default 40 x 5), both with --op-trace (the strand traces say
  # where each unit's exposure sits), --open-chunks OPEN_CHUNKS (default 4); OPEN_T seconds per run (default 240).
  echo "== strands-open ($(date +%T))" | tee -a "$log"
  T=${OPEN_T:-240} mpi bench strands --model llama3-70b --tp 2 --seq 4096 --comm nccl-ce --no-graph --gemm-sm-reserve 0 \
    --iters ${OPEN_NVLINK_ITERS:-64} --rounds ${OPEN_NVLINK_ROUNDS:-8} --warmup 2 --op-trace --open-chunks ${OPEN_CHUNKS:-4} \
    $(pairs_for strands-pairs-llama3-70b-nvlink-nccl-ce-eb35616.txt) \
    --json "$out/strands-open-nvlink.jsonl" > "$out/strands-open-nvlink.log" 2>&1
  echo "nvlink rc=$?" | tee -a "$log"
  T=${OPEN_T:-240} mpi bench strands --model llama3-70b --tp 2 --seq 4096 --throttle 1 --no-graph --gemm-sm-reserve 4 \
    --iters ${STRANDS_ITERS:-40} --rounds ${STRANDS_ROUNDS:-5} --warmup 2 --op-trace --open-chunks ${OPEN_CHUNKS:-4} \
    $(pairs_for strands-pairs-llama3-70b-throttled-e782a52.txt) \
    --json "$out/strands-open-throttle1.jsonl" > "$out/strands-open-throttle1.log" 2>&1
  echo "throttle1 rc=$?" | tee -a "$log"
  grep -hE "FAILED|^# noise|^single|^round-robin |-open|corun-moves|arena-io-moves" "$out"/strands-open-*.log | cut -c1-170 | tee -a "$log"
fi
if has strands-ce; then  # DHelix over a copy-engine comm against NCCL, NVLink (peer-ce and nccl-ce have no throttle)
  # CE_COMMS (nccl, nccl-ce: NCCL's copy engines, no SM; peer-ce: braid's), CE_MODELS, SMRES_CE (SMs the GEMMs leave:
  # peer-ce's barriers, stage copies and sums need some; nccl-ce none, so SMRES_CE=0 there), CE_T (seconds per run)
  echo "== strands, --comm ${CE_COMMS:-nccl peer-ce} ($(date +%T))" | tee -a "$log"
  for c in ${CE_COMMS:-nccl peer-ce}; do
    for model in ${CE_MODELS:-llama3-70b mixtral-8x7b}; do
      ep=(); [[ $model == mixtral-8x7b ]] && ep=(--ep 2)
      T=${CE_T:-200} mpi bench strands --model "$model" --tp 2 ${ep[@]+"${ep[@]}"} --seq 4096 --comm "$c" \
        --iters ${STRANDS_ITERS:-10} --rounds ${STRANDS_ROUNDS:-3} --warmup 2 --no-graph \
        --gemm-sm-reserve ${SMRES_CE:-4} ${STRANDS_ARGS:-} --json "$out/strands-ce.jsonl" 2>&1 | tee -a "$log"
    done
  done
fi
# The device tool returns at most 8 files: bundle the JSON lines and tables.
# (The search's inputs and caches, e.g. inputs.txt.peer-copy-engine, too: a ninth file is not returned, nor is run.log.)
if has shared-bench; then  # one GPU: bench strands / layer at TP = EP = 2, two ranks sharing it over the peer comm
  # (verifications only: the banner says the times are not measurements; scripts/shared-gpu-bench.sh, T1/T2/T3)
  echo "== shared-bench ($(date +%T))" | tee -a "$log"
  bash scripts/shared-gpu-bench.sh "$out"
fi
# A second run of this script into the same OUT bundles into results-2.tgz, -3, ... (sixty-second session: a second
# run's results.tgz replaced the first's).
bundle=results.tgz; i=2
while [[ -e "$out/$bundle" ]]; do bundle=results-$i.tgz; i=$((i + 1)); done
(cd "$out" && tar czf "$bundle" --remove-files $(ls *.jsonl *.tsv *.txt *.txt.* 2>/dev/null) 2>/dev/null)
echo "== done" | tee -a "$log"
