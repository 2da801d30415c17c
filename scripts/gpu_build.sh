# gpu_build.sh: sourced (not run) by the scripts that run ON the lent GPU machine
# (gpu_compare.sh, gpu_cuda.sh): builds mini's Python package against that machine's python3.
# The caller sets `root` (the repository), `python`, `build` (the build folder) and `log` (the
# build log), defines note() (one line for its report), calls gpu_build_setup, may append CMake
# arguments to the array gpu_args, then calls gpu_build TARGET... (0: built and imported).
# What that machine may lack and cannot download comes from .gpu_carry/ (scripts/gpu_prepare.sh
# stages it here; name it in the call's carry): pybind11 at the pin, Python 3.12 headers,
# OpenBLAS, Catch2 (header-only). MINI_GPU_BLAS=carried skips the machine's own BLAS;
# MINI_GPU_HEADERS=carried uses the carried Python headers even where the machine has its own
# (both for trying the fallbacks elsewhere); MINI_GPU_CXX overrides the C++ compiler.

gpu_build_setup() {
  # That machine sets CXX/CC to a GCC under /opt/gcc that links libstdc++ statically into
  # shared objects, without libstdc++'s stream initialization: the first std::ostringstream in
  # mini then crashes. Build (and let mini's inductor compile) with the distribution's
  # compiler, whose libstdc++ is the shared one Python already loaded; nvcc uses it as its
  # host compiler too.
  if [ -x "${MINI_GPU_CXX:-/usr/bin/g++}" ]; then
    export CXX=${MINI_GPU_CXX:-/usr/bin/g++}
    [ -x /usr/bin/gcc ] && export CC=/usr/bin/gcc
  fi
  carry=$root/.gpu_carry
  gpu_args=(-DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$python" -DMINI_SANITIZED_TESTS=OFF)
  command -v ninja >/dev/null && gpu_args+=(-G Ninja)
  if [ -f "$carry/site/pybind11/__init__.py" ]; then
    export PYTHONPATH="$carry/site${PYTHONPATH:+:$PYTHONPATH}"   # the pinned pybind11 first
    note "pybind11 from .gpu_carry/site ($(cat "$carry/site/.pin" 2>/dev/null))"
  fi
  local has_header
  has_header=$("$python" -c 'import sysconfig, os; print(int(os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))))')
  if [ "$has_header" != 1 ] || [ "${MINI_GPU_HEADERS:-}" = carried ]; then
    if [ -f "$carry/include/python3.12/Python.h" ]; then
      gpu_args+=(-DPython_INCLUDE_DIR="$carry/include/python3.12")
      note "using the carried 3.12 headers (another 3.12 patch release): $([ "$has_header" = 1 ] && echo "MINI_GPU_HEADERS=carried" || echo "$python has no Python.h")"
    else
      note "no Python.h for $python and none carried: the build will fail"
    fi
  fi
}

gpu_configure() { rm -rf "$build"; cmake -S "$root" -B "$build" "${gpu_args[@]}" "$@" >>"$log" 2>&1; }

gpu_build_and_import() {   # builds the targets, then imports mini (an unresolved BLAS symbol shows here)
  cmake --build "$build" -j"$(nproc)" --target "$@" >>"$log" 2>&1 || return 1
  PYTHONPATH="$build/python" "$python" -c 'import mini; mini.matmul(mini.randn(2, 3), mini.randn(3, 2))' \
    >>"$log" 2>&1
}

gpu_use_carried_blas() {
  [ -f "$carry/openblas/lib/libopenblas.so" ] || return 1
  ln -sf libopenblas.so "$carry/openblas/lib/libopenblas.so.0"
  export LD_LIBRARY_PATH="$carry/openblas/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! ldconfig -p | grep -q 'libgfortran.so.5'; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$carry/openblas/extra"
    note "no libgfortran.so.5 on the machine: using the carried one"
  fi
  gpu_configure -DBLA_VENDOR=OpenBLAS -DCMAKE_LIBRARY_PATH="$carry/openblas/lib" \
                -DCBLAS_INCLUDE_DIR="$carry/openblas/include"
}

gpu_blas_in_cache() {
  grep -E '^(BLAS_[A-Za-z0-9]+_LIBRARY|CBLAS_INCLUDE_DIR):' "$build/CMakeCache.txt" | grep -v NOTFOUND |
    sed 's/:[A-Z]*=/=/' | tr '\n' ' '
}

gpu_build() {   # gpu_build TARGET...: the machine's own BLAS first, then the carried OpenBLAS
  if [ "${MINI_GPU_BLAS:-}" != carried ]; then
    if gpu_configure; then
      note "configured with the machine's own BLAS: $(gpu_blas_in_cache)"
      gpu_build_and_import "$@" && return 0
      note "build or import with the machine's own BLAS failed ($(basename "$log"))"
    else
      note "configure failed with the machine's own libraries ($(basename "$log"))"
    fi
  fi
  if ! [ -f "$carry/openblas/lib/libopenblas.so" ]; then
    note "no carried OpenBLAS (scripts/gpu_prepare.sh) to fall back on"
    return 1
  fi
  note "configuring with the carried OpenBLAS"
  if ! gpu_use_carried_blas; then
    note "configure failed with the carried OpenBLAS too ($(basename "$log"))"
    return 1
  fi
  note "configured with: $(gpu_blas_in_cache)"
  gpu_build_and_import "$@" || { note "build or import failed ($(basename "$log"))"; return 1; }
}
