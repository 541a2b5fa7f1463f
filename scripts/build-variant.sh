#!/usr/bin/env bash
# scripts/build-variant.sh BUILD TU[,TU...] TAG DEFINES... — a second `braid` executable, BUILD/braid-TAG, whose
# translation units TU (source paths, e.g. src/collectives/allreduce.cu; several comma-separated, compiled in
# parallel, e.g. the three of the grouped GEMM) are compiled with extra -D DEFINES;
# everything else is BUILD's. For A/B runs of a compile-time kernel variant in one process launch each, on
# one machine, without a second full build: one TU compile, an archive copy, one link. BUILD must already
# be built (its `braid` target), with Ninja.
#
#   scripts/build-variant.sh build src/collectives/allreduce.cu cvt0 BRAID_AR_FASTCVT=0
#   mpirun -np 2 build/braid-cvt0 bench allreduce ...
set -euo pipefail
build=${1:?BUILD dir}; tu=${2:?translation unit}; tag=${3:?tag}; shift 3
(( $# > 0 )) || { echo "build-variant: no -D definitions given" >&2; exit 2; }
work="$build/variant-$tag"
rm -rf "$work" && mkdir -p "$work"
cd "$build"
members=()
IFS=, read -ra tus <<< "$tu"
for t in "${tus[@]}"; do
  obj="CMakeFiles/braid.dir/$t.o"
  compile=$(ninja -t commands "$obj" | tail -1)
  [[ $compile == *" -c "* ]] || { echo "build-variant: no compile command for $obj" >&2; exit 1; }
  defs=""
  for d in "$@"; do  # a definition the build already passes (e.g. BRAID_OVERLAP_TMA_STORE=3) is replaced, not repeated
    defs+=" -D$d"
    compile=$(sed -E "s/ -D${d%%=*}(=[^ ]*)?( |$)/\2/g" <<< "$compile")
  done
  member=$(basename "$obj")
  # The same command with the extra definitions, writing into the variant folder (no dependency file);
  # refuse to run anything that would still write BUILD's own object.
  compile=$(sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//; s#( -o )'"$obj"'( |$)#\1variant-'"$tag/$member"'\2#' <<< "$compile")
  [[ $compile == *" -o variant-$tag/$member"* && $compile != *"$obj"* ]] \
    || { echo "build-variant: could not redirect the object of $obj" >&2; exit 1; }
  eval "${compile/ -c / $defs -c }" &
  members+=("$member")
done
wait
for member in "${members[@]}"; do
  [[ -f "variant-$tag/$member" ]] || { echo "build-variant: no variant-$tag/$member" >&2; exit 1; }
done
cp libbraid.a "variant-$tag/libbraid.a"
(cd "variant-$tag" && ar r libbraid.a "${members[@]}")
link=$(ninja -t commands braid | tail -1)
link=${link/ libbraid.a / variant-$tag/libbraid.a }
link=${link/ -o braid / -o braid-$tag }
eval "$link"
echo "build-variant: $build/braid-$tag ($tu with$defs)"
