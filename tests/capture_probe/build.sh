#!/usr/bin/env bash
# build.sh PYTHON OUTDIR: builds the _capture_probe test extension for one interpreter.
#
# Compiles the CPython-facing foundation of mini/capture/ (bytecode*.cpp, frame_hook.cpp,
# frame_py3*.cpp; each per-version file is empty unless it matches PYTHON's headers; the
# tracer and compiler above it need the rest of mini and are not part of the probe) with
# probe_module.cpp and header_tables.c into OUTDIR/_capture_probe<EXT_SUFFIX>,
# against PYTHON's own headers. SAN=1 adds -fsanitize=address,undefined; to load that build,
# run python with LD_PRELOAD=$(g++ -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0.
set -euo pipefail

python=${1:?usage: build.sh PYTHON OUTDIR}
outdir=${2:?usage: build.sh PYTHON OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
capture=$(cd "$here/../../mini/capture" && pwd)

include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')

flags=(-O1 -g -fPIC -fvisibility=hidden -Wall -Wextra -I"$include")
if [ "${SAN:-0}" = 1 ]; then
  flags+=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
fi

mkdir -p "$outdir"
objects=()
for source in "$capture"/bytecode*.cpp "$capture"/frame_hook.cpp "$capture"/frame_py3*.cpp \
              "$here/probe_module.cpp"; do
  object="$outdir/$(basename "${source%.cpp}").o"
  g++ -std=c++17 "${flags[@]}" -I"$capture" -c "$source" -o "$object"
  objects+=("$object")
done
gcc -std=c11 "${flags[@]}" -c "$here/header_tables.c" -o "$outdir/header_tables.o"
objects+=("$outdir/header_tables.o")

g++ -shared "${flags[@]}" "${objects[@]}" -o "$outdir/_capture_probe$suffix"
echo "built $outdir/_capture_probe$suffix"
